// Package runlog is the format of soma-trial's log folder: each worker
// slot of a soma-trial process appends the output of every attempt it
// runs to its own files and indexes where each attempt's output starts
// and ends (Writer); soma logs finds an attempt's bytes (Find, CopyRange).
// The runner (internal/trialrun) writes it and the views
// (internal/status) read it; neither imports the other for it.
package runlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/soma-hpc/soma/fsstore"
)

// Where the objectives' output goes. Each worker of a soma-trial process
// (one of its --parallel slots) appends the output of every attempt it
// runs to its own files, one attempt after another, and notes where each
// attempt's output starts and ends in an index:
//
//	logs/<study>/<host>.<pid>.<worker>.out  the objectives' stdout
//	logs/<study>/<host>.<pid>.<worker>.err  their stderr
//	logs/<study>/<host>.<pid>.<worker>.idx  one line per attempt start and end:
//	    start <trial> <attempt> <out offset> <err offset>
//	    end <trial> <attempt> <out offset> <err offset>
//
// A file per attempt cost a file creation per trial, the costliest call of
// a trial after the directories (measured on ext4: 4% of soma-trial's
// rate), and left a study of 100k trials with 100k small files: what a
// parallel filesystem's metadata server, and an inode quota, like least.
// The index is not synced: logs help a person; the study's records are
// the truth. Output that an objective's leftover children write after it
// exits lands after its range.

// Dir is the folder of a study's logs.
func Dir(root, studyName string) string { return filepath.Join(root, "logs", studyName) }

// Writer is one worker slot's log files. The objective's stdout and stderr
// are the files themselves (no pipe, no copying), opened for appending and
// for reading (its last line and stderr's tail are read back).
//
// An attempt's end mark waits for the next attempt's start mark (or
// Close) and both go in one write: a write to a file on ext4 dirties its
// inode (the mtime) in the journal, ~16 us of CPU per write (profiled
// with 8 processes on 2 CPUs; writes per trial 5.2 -> 4.2). Until then
// Find takes the attempt as unended, its output running to the files'
// ends: the same bytes, as nothing else writes to them meanwhile.
//
// The files' ends are kept in the process rather than asked of the file
// server at each mark (a seek to the end of an O_APPEND file is a
// GETATTR on NFS): the end of one attempt's output, as the objective
// package learns it (objective.Result.StdoutEnd: from the offset of the
// descriptor the objective wrote through, proved by the read of stdout's
// tail), is the end mark and the next attempt's start, and objective.Run
// is told it (Options.EndsKnown). Bug (issue 18): each attempt sought
// both files' ends four times (start mark, the objective's start, the
// tails, end mark): 8 of a trial's ~41 file-server operations; then the
// two stats after the objective were 2 of 30, now none. Nothing
// else writes a worker's files between its attempts: the names carry
// host, pid and worker, and the objective's whole tree has exited
// (objective.Run waits for it) before its end is read. A process that
// escaped the tree and writes later lands in the next attempt's range.
type Writer struct {
	Out, Err *os.File // the objective's stdout and stderr: the files themselves
	idx      *os.File
	pend     []byte // the last end mark, not yet written
	// The files' ends, where known (see above); else the next mark
	// seeks them. running: an attempt has started and its ends have not
	// been given (ended) since, so the files may have grown.
	known, running bool
	outEnd, errEnd int64
}

// Open opens (making them if new) worker's files in the study's
// log folder dir, following no link (a link there is refused: the output
// must not land outside the root).
func Open(dir *fsstore.Beneath, host string, pid, worker int) (*Writer, error) {
	base := fmt.Sprintf("%s.%d.%d", host, pid, worker)
	var files [3]*os.File
	for i, ext := range []string{".out", ".err", ".idx"} {
		f, err := dir.OpenFile(base+ext, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666)
		if err != nil {
			for _, g := range files[:i] {
				g.Close()
			}
			return nil, err
		}
		files[i] = f
	}
	return &Writer{Out: files[0], Err: files[1], idx: files[2]}, nil
}

// Mark notes the start ("start") or end ("end") of attempt a of trial n
// at the files' current ends (as known, else sought): a start is written
// at once, with the end mark before it; an end waits (Writer).
func (l *Writer) Mark(kind string, n, a int) error {
	if !l.known || l.running {
		outPos, err := l.Out.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		errPos, err := l.Err.Seek(0, io.SeekEnd)
		if err != nil {
			return err
		}
		l.outEnd, l.errEnd, l.known = outPos, errPos, true
	}
	l.pend = fmt.Appendf(l.pend, "%s %d %d %d %d\n", kind, n, a, l.outEnd, l.errEnd)
	l.running = kind == "start"
	if kind == "end" {
		return nil
	}
	return l.flush()
}

// Ended takes the files' ends after an attempt's objective has exited,
// as objective.Run read them (Result.StdoutEnd, StderrEnd); ok false, or
// an end not known (-1), leaves them to be sought by the next mark.
func (l *Writer) Ended(outEnd, errEnd int64, ok bool) {
	l.outEnd, l.errEnd = outEnd, errEnd
	l.known = ok && outEnd >= 0 && errEnd >= 0
	l.running = false
}

// Ends says where the files end, where the Writer knows it (see Writer):
// the objective is told them (objective.Options.EndsKnown, StdoutEnd,
// StderrEnd) so that it need not ask the file server.
func (l *Writer) Ends() (known bool, outEnd, errEnd int64) {
	return l.known, l.outEnd, l.errEnd
}

// flush writes the marks not yet written.
func (l *Writer) flush() error {
	if len(l.pend) == 0 {
		return nil
	}
	_, err := l.idx.Write(l.pend)
	l.pend = l.pend[:0]
	return err
}

// Close writes the pending end mark and closes the files.
func (l *Writer) Close() error {
	return errors.Join(l.flush(), l.Out.Close(), l.Err.Close(), l.idx.Close())
}

// Attempt says where one attempt's output is kept.
type Attempt struct {
	Out, Err string // the worker's stdout and stderr files
	// The attempt's bytes in them. Ended false: the attempt has no end
	// mark (it runs, or its soma-trial died): its output runs to the
	// files' ends.
	OutStart, OutEnd, ErrStart, ErrEnd int64
	Ended                              bool
}

// Find looks for attempt a of trial n in the study's log indexes.
func Find(root, studyName string, n, a int) (Attempt, bool, error) {
	dir := Dir(root, studyName)
	idxs, err := filepath.Glob(filepath.Join(dir, "*.idx"))
	if err != nil {
		return Attempt{}, false, err
	}
	want := " " + strconv.Itoa(n) + " " + strconv.Itoa(a) + " "
	var found Attempt
	ok := false
	for _, p := range idxs {
		// O_NOFOLLOW: an index that is a link is not soma's.
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) {
			continue
		}
		if err != nil {
			return Attempt{}, false, err
		}
		sc := bufio.NewScanner(f)
		inside := false // between our start and its end in this index
		for sc.Scan() {
			line := sc.Text()
			kind, rest, _ := strings.Cut(line, " ")
			mine := strings.HasPrefix(" "+rest, want)
			var o, e int64
			if f4 := strings.Fields(rest); len(f4) == 4 {
				o, _ = strconv.ParseInt(f4[2], 10, 64)
				e, _ = strconv.ParseInt(f4[3], 10, 64)
			} else {
				continue // a torn line
			}
			switch {
			case kind == "start" && mine:
				base := strings.TrimSuffix(p, ".idx")
				found = Attempt{Out: base + ".out", Err: base + ".err", OutStart: o, ErrStart: e}
				ok, inside = true, true
			case inside && (kind == "end" && mine || kind == "start"):
				// Its end, or the next attempt's start if the end was lost.
				found.OutEnd, found.ErrEnd, found.Ended = o, e, true
				inside = false
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return Attempt{}, false, fmt.Errorf("%s: %w", p, err)
		}
	}
	return found, ok, nil
}

// CopyRange copies path's bytes from off up to end (end < 0: to the
// file's end) to w and returns the offset reached. It opens the file
// afresh each time: on NFS only a new open is sure to see what another
// node appended (close-to-open consistency). A missing file holds
// nothing.
func CopyRange(path string, off, end int64, w io.Writer) (int64, error) {
	if end >= 0 && off >= end {
		return off, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return off, nil
	}
	if err != nil {
		return off, err
	}
	defer f.Close()
	var r io.Reader = io.NewSectionReader(f, off, 1<<62)
	if end >= 0 {
		r = io.NewSectionReader(f, off, end-off)
	}
	n, err := io.Copy(w, r)
	return off + n, err
}
