package submit

import (
	"context"
	"testing"

	"github.com/soma-hpc/soma/study"
)

// Issue 16: for a job script given to sbatch by hand, soma slurm jobs
// said "no Slurm jobs recorded", though every trial record named the job
// (SLURM_JOB_ID). With FromRecords the jobs the records name are listed,
// once each, apart from those a submission record already names.
func TestJobsFromTrialRecords(t *testing.T) {
	f := newFixture(t)
	client, _ := fakeSlurm(t)
	ctx := context.Background()
	if _, err := Submit(ctx, f.store, f.options(func(o *Options) { o.Slurm = client })); err != nil { // job 4242
		t.Fatal(err)
	}
	st, err := study.Open(ctx, f.store, "spam", nil, study.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for n, job := range []string{"77_0", "77_1", "80", "4242_3", "", "77_2"} {
		who := study.Me(job)
		run, err := st.Take(ctx, n, who)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Finish(ctx, study.StateDone, 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Jobs(ctx, f.store, "spam", JobsOptions{Offline: true, FromRecords: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, j := range l.Jobs {
		if j.FromRecords {
			got[j.Job.String()] = j.Trials
		} else if j.Job != 4242 {
			t.Errorf("a submitted job %s, want only 4242", j.Job)
		}
	}
	if len(l.Jobs) != 3 || got["77"] != 3 || got["80"] != 1 {
		t.Errorf("jobs %+v: from records %v, want 4242 submitted, 77 (3 trials) and 80 (1) from records", l.Jobs, got)
	}
	if l, _ := Jobs(ctx, f.store, "spam", JobsOptions{Offline: true}); len(l.Jobs) != 1 {
		t.Errorf("without FromRecords: %d jobs, want the 1 submitted", len(l.Jobs))
	}
}
