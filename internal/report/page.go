package report

import (
	"bytes"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
)

// CheckID is the id of the element where the page's script records, for
// tests and curious users, which plots hold marks (data-plots, names
// separated by spaces) and how many errors the page met (data-errors):
// uncaught exceptions, console.error calls, failed loads and anything the
// Content-Security-Policy blocked.
const CheckID = "soma-check"

// render returns the page and what it holds.
func (d *data) render() (string, Info) {
	plots := []plot{d.history(), d.curves(), d.params(), d.parallel()}
	if len(d.metrics) > 1 {
		plots = append([]plot{d.front()}, plots...)
	}
	info := Info{Trials: len(d.trials)}
	for _, p := range plots {
		if p.marks > 0 {
			info.Plots = append(info.Plots, p.name)
		}
	}
	for _, t := range d.trials {
		if len(t.curve) > 0 {
			info.Curves++
		}
	}
	info.Curves = min(info.Curves, d.o.MaxCurves)
	var b bytes.Buffer
	err := pageTemplate.Execute(&b, d.page(plots))
	if err != nil {
		// The template is fixed and its data plain: only a bug gets here.
		panic(fmt.Sprintf("report: page template: %v", err))
	}
	return b.String(), info
}

type pageData struct {
	Title, Source, Generated string
	CheckID                  string
	Facts                    [][2]string
	Problems                 []string
	Plots                    []pagePlot
	Head                     []string
	Rows                     []pageRow
	Script                   template.JS
	CSS                      template.CSS
}

type pagePlot struct {
	Name, Title, Caption string
	SVG                  template.HTML
}

type pageRow struct {
	T     int
	Cells []string
}

func (d *data) page(plots []plot) pageData {
	v := d.view
	c := v.Counts
	pd := pageData{
		Title:     d.o.Title,
		Source:    d.o.Source,
		Generated: d.now.UTC().Format("2006-01-02 15:04:05 UTC"),
		CheckID:   CheckID,
		Problems:  v.Problems,
		Script:    template.JS(pageScript),
		CSS:       template.CSS(pageCSS),
	}
	fact := func(k, val string) { pd.Facts = append(pd.Facts, [2]string{k, val}) }
	fact("study", v.Name)
	fact("direction", v.Direction+" "+d.metric)
	fact("sampler · pruner", v.Sampler+" · "+v.Pruner)
	fact("seed · budget · retries", fmt.Sprintf("%d · %d · %d", v.Seed, v.Budget, v.MaxRetries))
	fact("trials", fmt.Sprintf("%d of %d ended: %d done, %d pruned, %d failed, %d interrupted, %d running, %d stale",
		c.Ended, v.Budget, c.Done, c.Pruned, c.Failed, c.Interrupted, c.Running, c.Stale))
	if c.Corrupt > 0 || c.Foreign > 0 {
		fact("problems", fmt.Sprintf("%d unreadable records (never results), %d stray files", c.Corrupt, c.Foreign))
	}
	if b := v.Best; b != nil {
		point := spaced(b.PointText)
		if t := d.byNumber(b.Trial); t != nil {
			var parts []string
			for j, k := range d.knobs {
				parts = append(parts, k.Name+"="+shortText(k, t.text[j]))
			}
			point = strings.Join(parts, " ")
		}
		fact("best", fmt.Sprintf("%s %s, trial %d: %s", d.metric, num(*b.Score), b.Trial, point))
	} else {
		fact("best", "no trial done yet")
	}
	if p := v.Pace; p.TrialsPerHour != nil {
		s := fmt.Sprintf("%s trials/hour (%s)", num(*p.TrialsPerHour), p.Basis)
		if p.ETASeconds != nil && p.Remaining > 0 {
			s += fmt.Sprintf(", %d left, ETA %s", p.Remaining, (time.Duration(*p.ETASeconds) * time.Second).Round(time.Second))
		}
		fact("pace", s)
	}
	var hosts []string
	for _, m := range v.Machines {
		hosts = append(hosts, fmt.Sprintf("%s (%d running)", m.Host, m.Running))
	}
	if len(hosts) > 8 {
		hosts = append(hosts[:8], fmt.Sprintf("… %d more", len(hosts)-8))
	}
	if len(hosts) > 0 {
		fact("machines", strings.Join(hosts, ", "))
	}
	for _, p := range plots {
		pd.Plots = append(pd.Plots, pagePlot{Name: p.name, Title: p.title, Caption: p.caption, SVG: template.HTML(p.svg)})
	}
	pd.Head = []string{"#", "trial", "state", d.metric, "steps", "host"}
	for _, k := range d.knobs {
		pd.Head = append(pd.Head, k.Name)
	}
	for i, r := range v.Top {
		cells := []string{strconv.Itoa(i + 1), strconv.Itoa(r.Trial), r.State, num(*r.Score), strconv.FormatInt(r.LastStep+1, 10), r.Who.Host}
		if t := d.byNumber(r.Trial); t != nil {
			for j, k := range d.knobs {
				cells = append(cells, shortText(k, t.text[j]))
			}
		}
		pd.Rows = append(pd.Rows, pageRow{T: r.Trial, Cells: cells})
	}
	return pd
}

func (d *data) byNumber(n int) *trial {
	for i := range d.trials {
		if d.trials[i].n == n {
			return &d.trials[i]
		}
	}
	return nil
}

func spaced(s string) string { return strings.ReplaceAll(s, ",", " ") }

// Nothing may be fetched: default-src 'none' blocks every load, and the
// check script reports any attempt as an error.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="soma report">
<title>{{.Title}}</title>
<style>{{.CSS}}</style>
<script>{{.Script}}</script>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<dl class="facts">{{range .Facts}}<dt>{{index . 0}}</dt><dd>{{index . 1}}</dd>{{end}}</dl>
{{if .Problems}}<details class="problems"><summary>{{len .Problems}} unreadable records</summary><ul>{{range .Problems}}<li>{{.}}</li>{{end}}</ul></details>{{end}}
</header>
<main>
{{range .Plots}}<section id="{{.Name}}">
<h2>{{.Title}}</h2>
<p class="caption">{{.Caption}}</p>
{{.SVG}}
</section>
{{end}}
{{if .Rows}}<section id="top">
<h2>Best trials</h2>
<table><thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr data-t="{{.T}}">{{range .Cells}}<td>{{.}}</td>{{end}}</tr>{{end}}</tbody></table>
</section>{{end}}
</main>
<footer>Read {{.Generated}} (file-server time){{if .Source}} from {{.Source}}{{end}} by soma report. This file is self-contained: it loads nothing and works offline.</footer>
<div id="tip" hidden></div>
<div id="{{.CheckID}}" hidden data-plots="" data-errors="">not run</div>
</body>
</html>
`))

const pageCSS = `
:root { --fg: #1d1d1f; --muted: #6b6b70; --line: #d9d9de; --accent: #e4572e; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: #fafafa; }
header, main, footer { max-width: 1040px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 20px; }
h1 { font-size: 22px; margin: 8px 0 12px; }
h2 { font-size: 17px; margin: 28px 0 4px; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; }
.caption { color: var(--muted); margin: 0 0 8px; max-width: 80ch; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 4px 16px 12px; margin: 16px 0; }
svg.plot { width: 100%; height: auto; display: block; }
svg text { font-size: 11px; fill: var(--muted); }
svg .label, svg .panel-title { font-size: 12px; fill: var(--fg); }
svg .panel-title { font-weight: 600; }
svg .empty { font-size: 14px; }
svg .grid { stroke: #eeeef2; }
svg .domain, svg .tickmark { stroke: #8a8a90; }
svg .legend rect { fill: #fff; fill-opacity: .85; stroke: var(--line); }
svg .legend text { fill: var(--fg); }
svg .axis text { paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.pruned { fill: none; stroke: #9a9a9a; stroke-width: 1.3; }
.failed, .stop { fill: none; stroke: #d62728; stroke-width: 2; }
.best { fill: none; stroke: var(--accent); stroke-width: 2; }
circle.done { stroke: #fff; stroke-width: .6; }
polyline { fill: none; }
polyline.curve.pruned { stroke-opacity: .7; }
polyline.line { stroke-width: 1.3; }
.mark.hl { stroke: var(--accent) !important; stroke-width: 3 !important; stroke-opacity: 1 !important; }
tr.hl td { background: #fdeee9; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #f0f0f3; white-space: nowrap; }
th { color: var(--muted); font-weight: 500; }
footer { color: var(--muted); padding: 8px 24px 32px; }
#tip { position: fixed; pointer-events: none; background: #1d1d1f; color: #fff; padding: 4px 8px; border-radius: 4px; font-size: 12px; max-width: 480px; }
.problems { margin-top: 8px; color: #a33; }
`

// pageScript records errors and which plots have marks into the check
// element (CheckID), and highlights a trial everywhere on hover.
const pageScript = `(function () {
  "use strict";
  var errors = [];
  function check() {
    var out = document.getElementById("soma-check");
    if (!out) { return; }
    var names = [];
    var svgs = document.querySelectorAll("svg.plot[data-plot]");
    for (var i = 0; i < svgs.length; i++) {
      if (svgs[i].querySelector(".mark")) { names.push(svgs[i].getAttribute("data-plot")); }
    }
    out.setAttribute("data-plots", names.join(" "));
    out.setAttribute("data-errors", String(errors.length));
    out.textContent = "plots present: " + names.join(" ") + "; errors: " + errors.length +
      (errors.length ? ": " + errors.join(" | ") : "");
  }
  window.addEventListener("error", function (e) {
    var what = e.message || ("failed to load " + ((e.target && (e.target.src || e.target.href)) || e.type));
    errors.push("error: " + what);
    check();
  }, true);
  window.addEventListener("unhandledrejection", function (e) { errors.push("unhandled rejection: " + e.reason); check(); });
  document.addEventListener("securitypolicyviolation", function (e) {
    errors.push("blocked by the page's policy: " + e.blockedURI + " (" + e.violatedDirective + ")");
    check();
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    check();
    return consoleError.apply(console, arguments);
  };
  function setup() {
    var tip = document.getElementById("tip");
    var lit = [];
    function clear() {
      for (var i = 0; i < lit.length; i++) { lit[i].classList.remove("hl"); }
      lit = [];
      tip.hidden = true;
    }
    document.addEventListener("mouseover", function (e) {
      var el = e.target && e.target.closest ? e.target.closest("[data-t]") : null;
      clear();
      if (!el) { return; }
      var t = el.getAttribute("data-t");
      lit = Array.prototype.slice.call(document.querySelectorAll('[data-t="' + t + '"]'));
      for (var i = 0; i < lit.length; i++) { lit[i].classList.add("hl"); }
      var title = el.querySelector("title");
      tip.textContent = title ? title.textContent : "trial " + t;
      tip.hidden = false;
    });
    document.addEventListener("mousemove", function (e) {
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 490) + "px";
      tip.style.top = (e.clientY + 14) + "px";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { setup(); check(); });
  window.addEventListener("load", check);
})();`
