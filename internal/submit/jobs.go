package submit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/soma-hpc/soma/fsstore"
	"github.com/soma-hpc/soma/slurm"
	"github.com/soma-hpc/soma/study"
)

// JobsOptions modify Jobs.
type JobsOptions struct {
	// Slurm runs squeue; the zero Client finds it on PATH.
	Slurm slurm.Client
	// Offline reads the records only and asks Slurm nothing.
	Offline bool
	// FromRecords adds the jobs that the study's trial records name and
	// no submission record does (Job.FromRecords). It reads every trial's
	// latest record, so a view that reads them anyway (soma status) does
	// not ask for it.
	FromRecords bool
}

// Job is a recorded submission and, when Slurm answered, its tasks.
type Job struct {
	Submission
	// Tasks are the job's squeue lines, when Slurm answered for it: one
	// per array task that has started (or ended, within MinJobAge), and
	// one for the array's tasks still pending (see slurm.Task.IsRemainder).
	Tasks []slurm.Task
	// Asked reports whether squeue answered for this job (Tasks or
	// Forgotten is then its answer).
	Asked bool
	// Forgotten reports that Slurm answered but does not know the job: it
	// ended more than MinJobAge ago (300 s by default), or it was
	// submitted to another cluster than the one this machine asks.
	Forgotten bool
	// FromRecords: no submission record names the job; the study's trial
	// records do (their Who.Job), so it was submitted some other way (a
	// job script given to sbatch by hand). Submitted is then the start of
	// its earliest attempt, Array is empty, and Trials counts the trials
	// whose latest attempt it ran.
	FromRecords bool `json:"from_records,omitempty"`
	Trials      int  `json:"trials,omitempty"`
}

// Counts returns how many of the job's tasks are in each Slurm state
// (PENDING, RUNNING, COMPLETED, FAILED...). A pending remainder line
// counts as all the tasks it stands for. It is empty unless Asked, and
// for a Forgotten job.
func (j Job) Counts() map[string]int {
	c := map[string]int{}
	for _, t := range j.Tasks {
		n := 1
		if t.IsRemainder() {
			if a, err := slurm.ParseArray(t.ArrayTask); err == nil {
				n = a.Len()
			}
		}
		c[t.State] += n
	}
	return c
}

// Active reports whether Slurm lists a task of the job that has not ended
// (pending, running, completing, suspended...).
func (j Job) Active() bool {
	for _, t := range j.Tasks {
		if !t.Ended() {
			return true
		}
	}
	return false
}

// JobList is the Slurm jobs submitted for a study.
type JobList struct {
	Study string
	// Jobs are the readable records, by submission time, then job id.
	Jobs []Job
	// Corrupt lists the records under study/<study>/slurm that could not
	// be read; they are reported, never returned in Jobs.
	Corrupt []error
	// Live reports that squeue answered for every job. When it is false
	// and the query was not Offline, LiveErr says why;
	// errors.Is(LiveErr, slurm.ErrUnavailable) means Slurm cannot be
	// reached from this machine (not installed, no configuration,
	// slurmctld down), which is normal on a laptop.
	Live    bool
	LiveErr error
}

// Jobs returns the Slurm jobs recorded for study studyName in store and,
// unless opts.Offline, asks squeue for each job's tasks. Slurm's absence
// or failure is not an error of Jobs: the records are returned with Live
// false and LiveErr set, and squeue is not asked again after it failed
// once (it may take seconds to give up). Jobs returns an error only when
// the store cannot be read or ctx ends. A study without submissions has
// an empty list; the study itself need not exist.
func Jobs(ctx context.Context, store *fsstore.Store, studyName string, opts JobsOptions) (JobList, error) {
	if err := study.ValidateName(studyName); err != nil {
		return JobList{}, fmt.Errorf("submit: %w", err)
	}
	bound, corrupt, err := store.Scan(ctx, prefix(studyName))
	if err != nil {
		return JobList{}, fmt.Errorf("submit: jobs of %s: %w", studyName, err)
	}
	l := JobList{Study: studyName}
	for _, c := range corrupt {
		l.Corrupt = append(l.Corrupt, c)
	}
	for _, b := range bound {
		s, err := decodeSubmission(studyName, b)
		if err != nil {
			l.Corrupt = append(l.Corrupt, err)
			continue
		}
		l.Jobs = append(l.Jobs, Job{Submission: s})
	}
	recorded := map[slurm.JobID]bool{}
	for _, j := range l.Jobs {
		recorded[j.Job] = true
	}
	if opts.FromRecords {
		seen, err := jobsInRecords(ctx, store, studyName)
		if err != nil {
			return JobList{}, fmt.Errorf("submit: jobs of %s: %w", studyName, err)
		}
		for _, j := range seen {
			if !recorded[j.Job] {
				l.Jobs = append(l.Jobs, j)
			}
		}
	}
	slices.SortFunc(l.Jobs, func(a, b Job) int {
		if c := a.Submitted.Compare(b.Submitted); c != 0 {
			return c
		}
		return cmp.Compare(a.Job, b.Job)
	})
	if opts.Offline {
		return l, nil
	}
	l.Live = true
	for i := range l.Jobs {
		j := &l.Jobs[i]
		tasks, err := opts.Slurm.Tasks(ctx, j.Job)
		switch {
		case err == nil:
			j.Tasks, j.Asked = tasks, true
		case errors.Is(err, slurm.ErrUnknownJob):
			j.Forgotten, j.Asked = true, true
		case ctx.Err() != nil:
			return JobList{}, fmt.Errorf("submit: jobs of %s: %w", studyName, ctx.Err())
		default:
			l.Live, l.LiveErr = false, err
			return l, nil
		}
	}
	return l, nil
}

// Lines summarises the list for a status view, one line per job, like
// "job 4242 (array 0-63%8): 8 running, 40 pending, 16 completed"; nil
// when nothing was submitted.
func (l JobList) Lines() []string {
	var out []string
	for _, j := range l.Jobs {
		arr := ""
		if j.Array != "" {
			arr = " (array " + j.Array + ")"
		}
		state := "state unknown (squeue not reachable)"
		switch {
		case j.Forgotten:
			state = "ended"
		case j.Asked:
			counts := j.Counts()
			keys := make([]string, 0, len(counts))
			for k := range counts {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%d %s", counts[k], strings.ToLower(k)))
			}
			state = strings.Join(parts, ", ")
		}
		out = append(out, fmt.Sprintf("job %s%s: %s", j.Job, arr, state))
	}
	return out
}

// jobsInRecords returns the Slurm jobs named by the latest attempt of
// each trial of the study (Who.Job, from SLURM_JOB_ID or the array's
// ids), as FromRecords jobs. A study that does not exist has none.
// (Bug: for a job script submitted by hand, soma slurm jobs said "no
// Slurm jobs recorded" though every trial record named the job; issue 16.)
func jobsInRecords(ctx context.Context, store *fsstore.Store, studyName string) ([]Job, error) {
	st, err := study.Open(ctx, store, studyName, nil, study.Options{})
	if errors.Is(err, study.ErrNoStudy) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	snap, err := st.Trials(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[slurm.JobID]*Job{}
	var order []slurm.JobID
	for _, r := range snap.Trials {
		ref, err := slurm.ParseRef(r.Who.Job)
		if r.Who.Job == "" || err != nil {
			continue
		}
		j := byID[ref.Job]
		if j == nil {
			j = &Job{Submission: Submission{Study: studyName, Job: ref.Job, Submitted: r.Start}, FromRecords: true}
			byID[ref.Job] = j
			order = append(order, ref.Job)
		}
		j.Trials++
		if r.Start.Before(j.Submitted) {
			j.Submitted = r.Start
		}
	}
	out := make([]Job, 0, len(order))
	for _, id := range order {
		out = append(out, *byID[id])
	}
	return out, nil
}
