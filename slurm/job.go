package slurm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// maxArrayIndex is the largest array task index any Slurm accepts:
// MaxArraySize may be at most 4000001 (slurm.conf(5)).
const maxArrayIndex = 4_000_000

// JobID is a Slurm job id. Every array task has a JobID of its own besides
// the array's id (its ArrayJobID). The zero JobID means "none".
type JobID uint32

// ParseJobID parses a decimal job id. It refuses zero, signs, spaces and
// Slurm's NO_VAL and INFINITE markers (0xfffffffe, 0xffffffff).
func ParseJobID(s string) (JobID, error) {
	n, err := parseUint(s, math.MaxUint32-2)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("slurm: job id %q: not a positive decimal number below 4294967294", s)
	}
	return JobID(n), nil
}

// String returns the decimal form, or "" for the zero JobID.
func (id JobID) String() string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(id), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (id JobID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: the empty text is the
// zero JobID, anything else must parse with ParseJobID.
func (id *JobID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*id = 0
		return nil
	}
	v, err := ParseJobID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// Ref addresses a job, or one task of an array job, the way Slurm's
// commands take it: "4242" or "4242_17".
type Ref struct {
	Job    JobID // the job, or the array's id when IsTask
	Task   int   // the array task index; meaningful only when IsTask
	IsTask bool
}

// ParseRef parses "4242" or "4242_17".
func ParseRef(s string) (Ref, error) {
	job, task, ok := strings.Cut(s, "_")
	id, err := ParseJobID(job)
	if err != nil {
		return Ref{}, fmt.Errorf("slurm: job reference %q: want JOBID or JOBID_TASK, like 4242 or 4242_17", s)
	}
	if !ok {
		return Ref{Job: id}, nil
	}
	n, err := parseUint(task, maxArrayIndex)
	if err != nil {
		return Ref{}, fmt.Errorf("slurm: job reference %q: task index %q is not a number from 0 to %d", s, task, maxArrayIndex)
	}
	return Ref{Job: id, Task: int(n), IsTask: true}, nil
}

// String returns "4242" or "4242_17"; "" for the zero Ref.
func (r Ref) String() string {
	if r.Job == 0 {
		return ""
	}
	if !r.IsTask {
		return r.Job.String()
	}
	return r.Job.String() + "_" + strconv.Itoa(r.Task)
}

// MarshalText implements encoding.TextMarshaler.
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Ref) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Ref{}
		return nil
	}
	v, err := ParseRef(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Job is what a process learns about its Slurm job from the environment
// that Slurm gives batch scripts and job steps. Counters that Slurm leaves
// unset are zero.
type Job struct {
	ID           JobID  `json:"id"`            // SLURM_JOB_ID: an array task's own id, not the array's
	ArrayJobID   JobID  `json:"array_job_id"`  // SLURM_ARRAY_JOB_ID; zero when the job is not an array task
	ArrayTaskID  int    `json:"array_task_id"` // SLURM_ARRAY_TASK_ID; meaningful only when ArrayJobID is set
	RestartCount int    `json:"restart_count"` // SLURM_RESTART_COUNT: 0 on the first run, n after n requeues
	Node         string `json:"node"`          // SLURMD_NODENAME: the node this process runs on ("" in an salloc shell)
	ProcID       int    `json:"proc_id"`       // SLURM_PROCID: the task's rank within its step
	LocalID      int    `json:"local_id"`      // SLURM_LOCALID: the task's rank on its node
	NodeID       int    `json:"node_id"`       // SLURM_NODEID: the node's rank within the job
	NumNodes     int    `json:"num_nodes"`     // SLURM_JOB_NUM_NODES
	NodeList     string `json:"node_list"`     // SLURM_JOB_NODELIST, in Slurm's compressed form (node[1-4])
	Name         string `json:"name"`          // SLURM_JOB_NAME, as the user gave it (any text)
	Partition    string `json:"partition"`     // SLURM_JOB_PARTITION
	Cluster      string `json:"cluster"`       // SLURM_CLUSTER_NAME
	SubmitDir    string `json:"submit_dir"`    // SLURM_SUBMIT_DIR
}

// FromEnv reads the job from getenv (os.Getenv in production). It returns
// ok=false and no error when SLURM_JOB_ID is unset or empty, i.e. outside
// Slurm, unless other job variables are set (a copied environment), which
// is an error. Every value that is set must be well formed: numbers are
// plain decimal, the array id and task id come together, the node name has
// no spaces or control characters. The error names the variable.
func FromEnv(getenv func(string) string) (job Job, ok bool, err error) {
	if getenv("SLURM_JOB_ID") == "" {
		// These exist only inside a job; one without SLURM_JOB_ID means the
		// environment was copied or faked.
		for _, k := range [...]string{
			"SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
			"SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
		} {
			if v := getenv(k); v != "" {
				return Job{}, false, fmt.Errorf("slurm: %s=%q is set but SLURM_JOB_ID is not (unset it, or run inside a Slurm job)", k, v)
			}
		}
		return Job{}, false, nil
	}
	var errs []error
	id := func(k string) JobID {
		v := getenv(k)
		if v == "" {
			return 0
		}
		n, err := ParseJobID(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("slurm: %s=%q: not a job id (a positive decimal number)", k, v))
		}
		return n
	}
	count := func(k string, max uint64) int {
		v := getenv(k)
		if v == "" {
			return 0
		}
		n, err := parseUint(v, max)
		if err != nil {
			errs = append(errs, fmt.Errorf("slurm: %s=%q: not a number from 0 to %d", k, v, max))
		}
		return int(n)
	}
	j := Job{
		ID:           id("SLURM_JOB_ID"),
		ArrayJobID:   id("SLURM_ARRAY_JOB_ID"),
		ArrayTaskID:  count("SLURM_ARRAY_TASK_ID", maxArrayIndex),
		RestartCount: count("SLURM_RESTART_COUNT", math.MaxInt32),
		ProcID:       count("SLURM_PROCID", math.MaxInt32),
		LocalID:      count("SLURM_LOCALID", math.MaxInt32),
		NodeID:       count("SLURM_NODEID", math.MaxInt32),
		NumNodes:     count("SLURM_JOB_NUM_NODES", math.MaxInt32),
		Node:         getenv("SLURMD_NODENAME"),
		NodeList:     getenv("SLURM_JOB_NODELIST"),
		Name:         getenv("SLURM_JOB_NAME"),
		Partition:    getenv("SLURM_JOB_PARTITION"),
		Cluster:      getenv("SLURM_CLUSTER_NAME"),
		SubmitDir:    getenv("SLURM_SUBMIT_DIR"),
	}
	arrayJob, arrayTask := getenv("SLURM_ARRAY_JOB_ID"), getenv("SLURM_ARRAY_TASK_ID")
	if (arrayJob == "") != (arrayTask == "") {
		errs = append(errs, fmt.Errorf("slurm: SLURM_ARRAY_JOB_ID=%q and SLURM_ARRAY_TASK_ID=%q: an array task has both, other jobs neither", arrayJob, arrayTask))
	}
	if j.Node != "" && !isWord(j.Node) {
		errs = append(errs, fmt.Errorf("slurm: SLURMD_NODENAME=%q: not a node name (no spaces or control characters)", j.Node))
	}
	if err := errors.Join(errs...); err != nil {
		return Job{}, false, err
	}
	return j, true, nil
}

// IsArray reports whether the job is a task of an array job.
func (j Job) IsArray() bool { return j.ArrayJobID != 0 }

// Ref returns the address that names this job to people and to Slurm's
// commands: "4242_17" for an array task, else "4242".
func (j Job) Ref() Ref {
	if j.IsArray() {
		return Ref{Job: j.ArrayJobID, Task: j.ArrayTaskID, IsTask: true}
	}
	return Ref{Job: j.ID}
}

// Me is the calling process as records describe it: its Slurm job, if it
// runs in one, its host and its pid.
type Me struct {
	Job   Job  // zero when InJob is false
	InJob bool // whether the process runs inside a Slurm job
	Host  string
	PID   int
}

// NewMe builds a Me from getenv (see FromEnv), a host name and a pid.
func NewMe(getenv func(string) string, host string, pid int) (Me, error) {
	j, ok, err := FromEnv(getenv)
	if err != nil {
		return Me{}, err
	}
	return Me{Job: j, InJob: ok, Host: host, PID: pid}, nil
}

// Self describes the calling process from os.Getenv, os.Hostname and
// os.Getpid. A host name that cannot be read becomes "unknown-host".
func Self() (Me, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return NewMe(os.Getenv, host, os.Getpid())
}

// Who returns one line of printable text naming where the process runs,
// for a record's meta and for `soma status`:
//
//	node7 4242_17 pid 1234             an array task
//	node7 4243 pid 1234                a job that is not an array
//	node7 4242_17 restart 2 pid 1234   after two requeues
//	node7 4244 proc 3 pid 1234         rank 3 of a multi-task step
//	laptop pid 1234                    outside Slurm
//
// The node is SLURMD_NODENAME (which differs from the host name on
// emulated nodes), else the host. Spaces and unprintable characters in the
// host name become '?', so the fields stay space-separated.
func (m Me) Who() string {
	var b strings.Builder
	node := m.Job.Node
	if node == "" {
		node = m.Host
	}
	if node == "" {
		node = "unknown-host"
	}
	for _, r := range node {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	if m.InJob {
		b.WriteString(" " + m.Job.Ref().String())
		if m.Job.RestartCount > 0 {
			fmt.Fprintf(&b, " restart %d", m.Job.RestartCount)
		}
		if m.Job.ProcID > 0 {
			fmt.Fprintf(&b, " proc %d", m.Job.ProcID)
		}
	}
	fmt.Fprintf(&b, " pid %d", m.PID)
	return b.String()
}

// String returns Who.
func (m Me) String() string { return m.Who() }

// parseUint parses plain decimal digits (no sign, no spaces, no
// underscores, no leading zeros: Slurm writes none) up to max.
func parseUint(s string, max uint64) (uint64, error) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > max {
		return 0, strconv.ErrRange
	}
	return n, nil
}

// isWord reports whether s is non-empty printable text without spaces.
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
