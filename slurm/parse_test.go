package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type sbatchOutputCase struct {
	in      string
	want    JobID
	wantErr bool
}

var sbatchOutputCases = []sbatchOutputCase{
	{in: "Submitted batch job 1234\n", want: 1234},
	{in: "Submitted batch job 1234", want: 1234},
	{in: "  Submitted batch job 7  \n\n", want: 7},
	{in: "Submitted batch job 67108865 on cluster c1\n", want: 67108865},
	{in: "1234\n", want: 1234},
	{in: "1234;cluster\n", want: 1234},
	{in: "1234;\n", want: 1234},
	{in: "", wantErr: true},
	{in: "\n", wantErr: true},
	{in: "Submitted batch job\n", wantErr: true},
	{in: "Submitted batch job 0\n", wantErr: true},
	{in: "Submitted batch job 12x\n", wantErr: true},
	{in: "Submitted batch job -1\n", wantErr: true},
	{in: "Submitted batch job 1234\nSubmitted batch job 1235\n", wantErr: true},
	{in: "sbatch: warning: something\n1234\n", wantErr: true},
	{in: "1234 5\n", wantErr: true},
	{in: "4294967295\n", wantErr: true},
}

func TestParseSbatchOutput(t *testing.T) {
	for _, tc := range sbatchOutputCases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSbatchOutput(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseSbatchOutput(%q) = %v, %v; want error %v", tc.in, got, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseSbatchOutput(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzParseSbatchOutput(f *testing.F) {
	for _, tc := range sbatchOutputCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, out string) {
		id, err := ParseSbatchOutput(out)
		if err != nil {
			return
		}
		if id == 0 || !strings.Contains(out, id.String()) {
			t.Fatalf("ParseSbatchOutput(%q) = %v, not a job id found in the output", out, id)
		}
	})
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type squeueCase struct {
	name    string
	in      string
	want    []Task
	wantErr string
}

// squeueCases; the first two are real output (Slurm 22.05, testdata/): an
// array 0-5%2 whose log directory was missing for its first two tasks, and
// a single pending job.
func squeueCases(t testing.TB) []squeueCase {
	return []squeueCase{
		{name: "array", in: readTestdata(t, "squeue-array.txt"), want: []Task{
			{ID: 21, ArrayJobID: 19, ArrayTask: "1", State: "FAILED", Nodes: "vm", Reason: "JobLaunchFailure"},
			{ID: 20, ArrayJobID: 19, ArrayTask: "0", State: "FAILED", Nodes: "vm", Reason: "JobLaunchFailure"},
			{ID: 19, ArrayJobID: 19, ArrayTask: "4-5%2", State: "PENDING", Reason: "JobArrayTaskLimit"},
			{ID: 23, ArrayJobID: 19, ArrayTask: "3", State: "RUNNING", Nodes: "vm", Reason: "None"},
			{ID: 22, ArrayJobID: 19, ArrayTask: "2", State: "RUNNING", Nodes: "vm", Reason: "None"},
		}},
		{name: "single", in: readTestdata(t, "squeue-single.txt"), want: []Task{
			{ID: 24, ArrayJobID: 24, State: "PENDING", Reason: "None"},
		}},
		{name: "empty", in: "", want: nil},
		{name: "blank lines and CRLF", in: "\n5|5|N/A|COMPLETED|n1|None\r\n\n", want: []Task{{ID: 5, ArrayJobID: 5, State: "COMPLETED", Nodes: "n1", Reason: "None"}}},
		{name: "reason with bar", in: "5|5|N/A|PENDING||a|b\n", want: []Task{{ID: 5, ArrayJobID: 5, State: "PENDING", Reason: "a|b"}}},
		{name: "too few fields", in: "5|5|N/A|RUNNING\n", wantErr: "4 fields, want 6"},
		{name: "bad id", in: "x|5|N/A|RUNNING|n|None\n", wantErr: `job id "x"`},
		{name: "bad array id", in: "5|0|N/A|RUNNING|n|None\n", wantErr: `job id "0"`},
		{name: "ids differ outside array", in: "5|4|N/A|RUNNING|n|None\n", wantErr: "differs"},
		{name: "bad task", in: "5|4|x|RUNNING|n|None\n", wantErr: `array task "x"`},
		{name: "bracketed task", in: "5|4|[1-3]|PENDING||None\n", wantErr: `array task "[1-3]"`},
		{name: "bad state", in: "5|5|N/A|running|n|None\n", wantErr: `state "running"`},
		{name: "header line", in: "JOBID|ARRAY_JOB_ID|ARRAY_TASK_ID|STATE|NODELIST|REASON\n", wantErr: `job id "JOBID"`},
	}
}

func TestParseSqueue(t *testing.T) {
	for _, tc := range squeueCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSqueue(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseSqueue error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSqueue: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseSqueue = %+v,\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTaskMethods(t *testing.T) {
	tests := []struct {
		name      string
		task      Task
		wantRef   string
		wantOK    bool
		remainder bool
		ended     bool
	}{
		{"array task", Task{ID: 22, ArrayJobID: 19, ArrayTask: "2", State: "RUNNING"}, "19_2", true, false, false},
		{"remainder", Task{ID: 19, ArrayJobID: 19, ArrayTask: "4-5%2", State: "PENDING"}, "", false, true, false},
		{"single", Task{ID: 24, ArrayJobID: 24, State: "COMPLETED"}, "24", true, false, true},
		{"timeout", Task{ID: 24, ArrayJobID: 24, State: "TIMEOUT"}, "24", true, false, true},
		{"completing", Task{ID: 24, ArrayJobID: 24, State: "COMPLETING"}, "24", true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, ok := tc.task.Ref()
			if ref.String() != tc.wantRef || ok != tc.wantOK {
				t.Errorf("Ref() = %q, %v; want %q, %v", ref, ok, tc.wantRef, tc.wantOK)
			}
			if got := tc.task.IsRemainder(); got != tc.remainder {
				t.Errorf("IsRemainder() = %v, want %v", got, tc.remainder)
			}
			if got := tc.task.Ended(); got != tc.ended {
				t.Errorf("Ended() = %v, want %v", got, tc.ended)
			}
		})
	}
}

func FuzzParseSqueue(f *testing.F) {
	for _, tc := range squeueCases(f) {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, out string) {
		tasks, err := ParseSqueue(out)
		if err != nil {
			return
		}
		for _, task := range tasks {
			if task.ID == 0 || task.ArrayJobID == 0 || !isStateName(task.State) {
				t.Fatalf("ParseSqueue(%q) gave %+v", out, task)
			}
			if ref, ok := task.Ref(); ok == task.IsRemainder() || (ok && ref.Job == 0) {
				t.Fatalf("ParseSqueue(%q): task %+v has Ref %v, %v", out, task, ref, ok)
			}
		}
	})
}

type showJobCase struct {
	name    string
	in      string
	check   func(t *testing.T, jobs []JobInfo)
	wantErr string
}

func showJobCases(t testing.TB) []showJobCase {
	// Both real outputs (testdata/) show the same array as the squeue
	// fixture, named "my job = x", logging to "/tmp/sj/a b".
	realArray := func(t *testing.T, jobs []JobInfo) {
		t.Helper()
		if len(jobs) != 5 {
			t.Fatalf("got %d records, want 5", len(jobs))
		}
		first := jobs[0]
		want := JobInfo{ID: 19, ArrayJobID: 19, ArrayTask: "4-5%2", Name: "my job = x", State: "PENDING",
			Reason: "JobArrayTaskLimit", ExitCode: "0:0", StdOut: "/tmp/sj/a b/%A_%a.out"}
		first.Fields = nil
		first.StdOut = strings.Replace(first.StdOut, "19_4294967294", "%A_%a", 1)
		if !reflect.DeepEqual(first, want) {
			t.Errorf("first record = %+v,\nwant %+v", first, want)
		}
		var refs []string
		for _, j := range jobs[1:] {
			refs = append(refs, j.ArrayJobID.String()+"_"+j.ArrayTask+"="+j.ID.String()+":"+j.State)
		}
		if want := []string{"19_3=23:RUNNING", "19_2=22:RUNNING", "19_1=21:FAILED", "19_0=20:FAILED"}; !reflect.DeepEqual(refs, want) {
			t.Errorf("tasks = %q, want %q", refs, want)
		}
		if got := jobs[1].Fields["TRES"]; got != "cpu=1,node=1,billing=1" {
			t.Errorf(`Fields["TRES"] = %q, want "cpu=1,node=1,billing=1"`, got)
		}
		if got := jobs[1].Fields["ReqB:S:C:T"]; got != "0:0:*:*" {
			t.Errorf(`Fields["ReqB:S:C:T"] = %q, want "0:0:*:*"`, got)
		}
		if got := jobs[1].StdOut; got != "/tmp/sj/a b/19_3.out" {
			t.Errorf("StdOut = %q, want the expanded path with its space", got)
		}
		if jobs[1].Ended() || !jobs[4].Ended() {
			t.Errorf("Ended() = %v, %v; want false for RUNNING, true for FAILED", jobs[1].Ended(), jobs[4].Ended())
		}
	}
	return []showJobCase{
		{name: "real multi-line", in: readTestdata(t, "scontrol-array.txt"), check: realArray},
		{name: "real one-line", in: readTestdata(t, "scontrol-array-oneline.txt"), check: realArray},
		{name: "requeued", in: "JobId=15 JobName=wrap JobState=RUNNING Reason=None Requeue=1 Restarts=1 ExitCode=0:0\n", check: func(t *testing.T, jobs []JobInfo) {
			if len(jobs) != 1 || jobs[0].Restarts != 1 || jobs[0].ArrayJobID != 0 || jobs[0].ArrayTask != "" {
				t.Errorf("got %+v, want one plain job restarted once", jobs)
			}
		}},
		{name: "empty", in: "", check: func(t *testing.T, jobs []JobInfo) {
			if len(jobs) != 0 {
				t.Errorf("got %+v, want none", jobs)
			}
		}},
		{name: "text before JobId", in: "No jobs in the system\n", wantErr: `"No" before the first JobId=`},
		{name: "bad JobId", in: "JobId=x JobState=RUNNING\n", wantErr: `job id "x"`},
		{name: "bad ArrayJobId", in: "JobId=5 ArrayJobId=0 ArrayTaskId=1\n", wantErr: "ArrayJobId"},
		{name: "bad ArrayTaskId", in: "JobId=5 ArrayJobId=4 ArrayTaskId=x\n", wantErr: `ArrayTaskId "x"`},
		{name: "bad Restarts", in: "JobId=5 Restarts=-1\n", wantErr: `restarts "-1"`},
		{name: "bad JobState", in: "JobId=5 JobState=running\n", wantErr: `JobState "running"`},
	}
}

func TestParseShowJob(t *testing.T) {
	for _, tc := range showJobCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseShowJob(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseShowJob error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseShowJob: %v", err)
			}
			tc.check(t, got)
		})
	}
}

func FuzzParseShowJob(f *testing.F) {
	for _, tc := range showJobCases(f) {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, out string) {
		jobs, err := ParseShowJob(out)
		if err != nil {
			return
		}
		for _, j := range jobs {
			if j.ID == 0 || j.Fields["JobId"] != j.ID.String() {
				t.Fatalf("ParseShowJob(%q) gave %+v", out, j)
			}
		}
	})
}
