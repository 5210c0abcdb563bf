package status

import (
	"encoding/json"
	"io"
)

// Format and Version name the JSON document soma status --json writes.
const (
	Format  = "soma-status"
	Version = 1
)

// Document is the JSON document of soma status --json (see JSONShape).
type Document struct {
	Format  string  `json:"format"`
	Version int     `json:"version"`
	Root    string  `json:"root"`
	Clock   string  `json:"clock"`
	Opened  Opens   `json:"opened"`
	Studies []*View `json:"studies"`
	// Problems describes studies that could not be read at all.
	Problems []string `json:"problems"`
	// Workers is the registry's short view; nil (absent) when no worker
	// has registered in the root.
	Workers *Workers `json:"workers,omitempty"`
}

// NewDocument returns the document for views read from s.
func NewDocument(s *Store, views []*View) *Document {
	clock, _ := s.Clock()
	if views == nil {
		views = []*View{}
	}
	return &Document{Format: Format, Version: Version, Root: s.Root(), Clock: clock, Opened: s.Opened(), Studies: views, Problems: []string{}}
}

// WriteJSON writes d as indented JSON, or on one line with compact (as
// soma status --json --watch does, one document per refresh).
func WriteJSON(w io.Writer, d *Document, compact bool) error {
	enc := json.NewEncoder(w)
	if !compact {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(d)
}

// JSONShape documents the JSON written by soma status --json, one line
// per field: its path ("[]" marks array elements, "*" any key; a path
// "?" may be absent), its type (string, integer, number, bool, object,
// array, or "trial", the object described by the lines under "trial";
// "|null" when it may be null), and what it means. It is printed by 'soma status --help', and the tests check every
// document soma writes against it.
//
// Stability: within one version, fields are only ever added; a field that
// changes meaning or goes away bumps version. Readers ignore fields they
// do not know. Times are RFC 3339 in the file server's clock; durations
// are seconds.
const JSONShape = `format                      string        always "soma-status"
version                     integer       1 (bumped when a field changes meaning or goes away)
root                        string        the store's absolute folder
clock                       string        "server" (file-server time) or "local" (root not writable here)
opened                      object        files this command opened (as --verbose prints)
opened.records              integer       name records read
opened.blobs                integer       blobs read
opened.lists                integer       folders listed
opened.probes               integer       server-time probes
problems                    array         studies of the root that cannot be read at all (a corrupt spec record, say)
problems[]                  string        which study, and what is wrong
workers?                    object        the soma-workers registered in the root (absent when none has; soma workers ROOT shows more)
workers.alive               integer       workers whose heartbeat is younger than timeout_s
workers.dead                integer       workers silent for longer (never placed on)
workers.slots               integer       plans the live workers run at once, together
workers.leases              integer       of those slots, held by placed plans
workers.timeout_s           number        the heartbeat timeout used
workers.list                array         one per worker, by id
workers.list[].id           string        the worker's id
workers.list[].alive        bool          whether its heartbeat is recent
workers.list[].address      string        the URL plans are sent to
workers.list[].leases       integer       its slots held
workers.list[].slots        integer       its slots (soma-worker --max-plans)
workers.list[].tags         array         its tags
workers.list[].tags[]       string        one tag
workers.list[].age_s        number        seconds since its last heartbeat
workers.problems            integer       worker records that cannot be read
studies                     array         one per study shown, by name (one with --study)
studies[].name              string        the study
studies[].direction         string        minimize, maximize or unknown
studies[].metric            string        the score's name ("" if the spec has none)
studies[].sampler           string        tpe, random, sobol or grid
studies[].pruner            string        none, median, percentile or asha
studies[].seed              integer       the study's seed
studies[].budget            integer       trials the study runs (budget, or the size of a smaller discrete space)
studies[].changes           array         changes of the budget (soma extend), oldest first
studies[].changes[].version integer      the spec version that made it (1, 2, ...)
studies[].changes[].from    integer       the budget before
studies[].changes[].budget  integer       the budget after
studies[].changes[].time    string        when, in file-server time
studies[].changes[].by      string        who made it (host:pid)
studies[].max_retries       integer       retries of a failed attempt
studies[].lease_s           number        a running attempt silent this long is stale
studies[].params            array         the knobs, in order
studies[].params[].name     string        knob name
studies[].params[].kind     string        int, float, choice or fixed
studies[].params[].low      number        lower bound (int, float)
studies[].params[].high     number        upper bound (int, float)
studies[].params[].log      bool          log scale
studies[].params[].choices  array         options (choice), the value (fixed)
studies[].params[].choices[] string       one option
studies[].now               string        file-server time of the snapshot
studies[].counts            object        trials by the state of their latest attempt
studies[].counts.total      integer       trials with a readable record
studies[].counts.done       integer       finished with a score
studies[].counts.running    integer       heartbeat within the lease
studies[].counts.pruned     integer       stopped by the pruner
studies[].counts.failed     integer       the objective failed
studies[].counts.interrupted integer      stopped by a signal; will be retried
studies[].counts.stale      integer       running, but silent for longer than the lease; will be retried
studies[].counts.ended      integer       done, pruned, or failed with no retry left
studies[].counts.corrupt    integer       records that could not be read (never results)
studies[].counts.foreign    integer       names in the trial and pack folders that are not the study's records (never run or counted)
studies[].best              trial|null    the best done trial; null before any is done, or with no direction
studies[].front?            object        several objectives only, once a trial is done: the Pareto front (soma best lists it)
studies[].front.metrics     array         the objectives' names
studies[].front.metrics[]   string        one metric
studies[].front.size        integer       done trials on the front
studies[].front.hypervolume number        the volume the front dominates up to the reference
studies[].front.reference   array         per metric, the worst done score pushed a tenth of the metric's range further
studies[].front.reference[] number        one metric's reference
studies[].pace              object        speed and ETA
studies[].pace.trials_per_hour number|null trials ended per hour (last hour, or since start, or all time)
studies[].pace.basis        string        which window the rate is over: last hour, since start, all time, finished, no trial ended yet
studies[].pace.remaining    integer       trials still to end
studies[].pace.eta_s        number|null   seconds until the budget is reached; null if unknown or idle
studies[].pace.eta          string|null   when, in file-server time
studies[].pace.idle         bool          nothing runs and nothing ended lately
studies[].machines          array         hosts, most recently seen first
studies[].machines[].host   string        host name ("?" if unknown)
studies[].machines[].running integer      running attempts on it
studies[].machines[].stale  integer       stale attempts on it
studies[].machines[].trials integer       trials whose latest attempt it ran
studies[].machines[].jobs   array         Slurm jobs of its running attempts ("123_4")
studies[].machines[].jobs[] string        one job
studies[].machines[].last_seen string     its newest record's time
studies[].machines[].ago_s  number        seconds since last_seen
studies[].top               array         the best done trials, best first (--top N)
studies[].top[]             trial         one trial
studies[].running           array         running and stale trials, by number
studies[].running[]         trial         one trial
studies[].trials?           array         every trial, by number (only with --all)
studies[].trials[]          trial         one trial
studies[].problems          array         one line per unreadable record
studies[].problems[]        string        what is wrong and where
studies[].foreign           array         one line per foreign name: a trial number outside the budget, a name that is not a number...
studies[].foreign[]         string        the name and what makes it foreign
studies[].packs             integer       packs holding ended trials (see soma gc)
studies[].last_activity     string|null   newest record time
trial                       object        a trial's latest attempt (in best, top, running and trials):
trial.trial                 integer       trial number
trial.attempt               integer       attempt number (retries count up from 0)
trial.state                 string        running, done, pruned, failed, interrupted or stale
trial.score                 number|null   final score (done) or last value (pruned)
trial.value                 number|null   last intermediate value
trial.last_step             integer       last intermediate step (-1: none)
trial.point                 object        knob values by name
trial.point.*               number|string a number for int and float knobs, text for choices (a number when every option is one)
trial.point_text            string        the point as name=value,...
trial.who                   object        the process that ran it
trial.who.host              string        host
trial.who.pid               integer       process id
trial.who.job               string        Slurm job ("123_4"; "" outside Slurm)
trial.start                 string|null   when the attempt was taken
trial.time                  string        its last write (heartbeat, report or end)
trial.duration_s            number        end − start, or now − start while it runs
trial.age_s                 number        now − time: seconds since its last write
trial.failures              integer       failed attempts of this trial before this one
trial.beat                  integer       heartbeat counter`
