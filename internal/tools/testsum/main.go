// Command testsum reads `go test -json` on stdin, prints what a person
// needs (each package's result, and the full output of every failed or
// panicking test), and ends with one summary line:
//
//	tests: N passed, N failed, N skipped
//
// Its exit status is 1 if any test or package failed (including a build
// failure), else 0.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var passed, failed, skipped, pkgFailed int
	out := map[string][]string{} // package/test -> output lines
	var skips []string
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors arrive as plain text
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			out[key] = append(out[key], e.Output)
		case "pass":
			if e.Test != "" {
				passed++
			} else {
				fmt.Printf("ok   %s (%.1fs)\n", e.Package, e.Elapsed)
			}
			delete(out, key)
		case "skip":
			if e.Test != "" {
				skipped++
				reason := ""
				for _, l := range out[key] {
					if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "---") && !strings.HasPrefix(s, "===") {
						reason = s
					}
				}
				skips = append(skips, fmt.Sprintf("%s %s: %s", e.Package, e.Test, reason))
			} else {
				fmt.Printf("---  %s (no tests)\n", e.Package)
			}
			delete(out, key)
		case "fail":
			if e.Test != "" {
				failed++
				fmt.Printf("FAIL %s %s\n%s", e.Package, e.Test, strings.Join(out[key], ""))
			} else {
				pkgFailed++
				fmt.Printf("FAIL %s (%.1fs)\n%s", e.Package, e.Elapsed, strings.Join(out[key], ""))
			}
			delete(out, key)
		}
	}
	if len(skips) > 0 {
		slices.Sort(skips)
		fmt.Println("skipped:")
		for _, s := range skips {
			fmt.Println("  " + s)
		}
	}
	if pkgFailed > 0 && failed == 0 {
		failed = pkgFailed // a package that failed to build or crashed outside a test
	}
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || pkgFailed > 0 {
		os.Exit(1)
	}
}
