package slurm

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// batchEnv is the identity part of a real array task's environment
// (Slurm 22.05, scripts/slurm-local.sh).
var batchEnv = []string{
	"SLURM_JOB_ID=2", "SLURM_ARRAY_JOB_ID=1", "SLURM_ARRAY_TASK_ID=0",
	"SLURMD_NODENAME=vm", "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	"SLURM_JOB_NUM_NODES=1", "SLURM_JOB_NODELIST=vm", "SLURM_JOB_NAME=a.sh",
	"SLURM_JOB_PARTITION=local", "SLURM_CLUSTER_NAME=somalocal", "SLURM_SUBMIT_DIR=/tmp/sj",
	"SLURM_ARRAY_TASK_COUNT=4", "SLURM_TASK_PID=13978",
}

type fromEnvCase struct {
	name    string
	env     []string
	want    Job
	wantOK  bool
	wantErr string // a fragment of the error; "" for none
}

var fromEnvCases = []fromEnvCase{
	{name: "outside Slurm", env: nil},
	{name: "outside Slurm, with config variables", env: []string{"SLURM_CONF=/etc/slurm/slurm.conf", "SLURM_TIME_FORMAT=relative"}},
	{name: "array task", env: batchEnv, wantOK: true, want: Job{
		ID: 2, ArrayJobID: 1, ArrayTaskID: 0, Node: "vm", NumNodes: 1, NodeList: "vm", Name: "a.sh",
		Partition: "local", Cluster: "somalocal", SubmitDir: "/tmp/sj",
	}},
	{name: "plain job, requeued, rank 3", env: []string{"SLURM_JOB_ID=4243", "SLURM_RESTART_COUNT=2", "SLURMD_NODENAME=node7", "SLURM_PROCID=3", "SLURM_LOCALID=1", "SLURM_NODEID=1"},
		wantOK: true, want: Job{ID: 4243, RestartCount: 2, Node: "node7", ProcID: 3, LocalID: 1, NodeID: 1}},
	{name: "salloc shell without a node", env: []string{"SLURM_JOB_ID=7"}, wantOK: true, want: Job{ID: 7}},
	{name: "job name with anything", env: []string{"SLURM_JOB_ID=7", "SLURM_JOB_NAME=it's a \"job\" $x"}, wantOK: true, want: Job{ID: 7, Name: "it's a \"job\" $x"}},
	{name: "job id not a number", env: []string{"SLURM_JOB_ID=12a"}, wantErr: `SLURM_JOB_ID="12a": not a job id`},
	{name: "job id zero", env: []string{"SLURM_JOB_ID=0"}, wantErr: `SLURM_JOB_ID="0"`},
	{name: "job id negative", env: []string{"SLURM_JOB_ID=-5"}, wantErr: `SLURM_JOB_ID="-5"`},
	{name: "job id with space", env: []string{"SLURM_JOB_ID= 5"}, wantErr: `SLURM_JOB_ID=" 5"`},
	{name: "job id with leading zero", env: []string{"SLURM_JOB_ID=007"}, wantErr: `SLURM_JOB_ID="007"`},
	{name: "job id too large", env: []string{"SLURM_JOB_ID=4294967295"}, wantErr: `SLURM_JOB_ID="4294967295"`},
	{name: "array task without array job", env: []string{"SLURM_JOB_ID=5", "SLURM_ARRAY_TASK_ID=3"}, wantErr: "an array task has both"},
	{name: "array job without task", env: []string{"SLURM_JOB_ID=5", "SLURM_ARRAY_JOB_ID=4"}, wantErr: "an array task has both"},
	{name: "task index out of range", env: []string{"SLURM_JOB_ID=5", "SLURM_ARRAY_JOB_ID=4", "SLURM_ARRAY_TASK_ID=4000001"}, wantErr: `SLURM_ARRAY_TASK_ID="4000001": not a number from 0 to 4000000`},
	{name: "restart count malformed", env: []string{"SLURM_JOB_ID=5", "SLURM_RESTART_COUNT=one"}, wantErr: `SLURM_RESTART_COUNT="one"`},
	{name: "proc id with plus", env: []string{"SLURM_JOB_ID=5", "SLURM_PROCID=+1"}, wantErr: `SLURM_PROCID="+1"`},
	{name: "node name with space", env: []string{"SLURM_JOB_ID=5", "SLURMD_NODENAME=node 7"}, wantErr: `SLURMD_NODENAME="node 7": not a node name`},
	{name: "node name with newline", env: []string{"SLURM_JOB_ID=5", "SLURMD_NODENAME=node7\nx"}, wantErr: `SLURMD_NODENAME="node7\nx"`},
	{name: "two errors reported together", env: []string{"SLURM_JOB_ID=5", "SLURM_PROCID=x", "SLURM_LOCALID=y"}, wantErr: `SLURM_LOCALID="y"`},
	{name: "task id without job id", env: []string{"SLURM_ARRAY_TASK_ID=3"}, wantErr: `SLURM_ARRAY_TASK_ID="3" is set but SLURM_JOB_ID is not`},
}

func TestFromEnv(t *testing.T) {
	for _, tc := range fromEnvCases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := FromEnv(envOf(tc.env...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromEnv error = %v, want one containing %q", err, tc.wantErr)
				}
				if ok {
					t.Errorf("FromEnv ok = true with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("FromEnv = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestWho(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		host string
		want string
	}{
		{"array task", []string{"SLURM_JOB_ID=4300", "SLURM_ARRAY_JOB_ID=4242", "SLURM_ARRAY_TASK_ID=17", "SLURMD_NODENAME=node7"}, "node7.cluster", "node7 4242_17 pid 1234"},
		{"plain job", []string{"SLURM_JOB_ID=4243", "SLURMD_NODENAME=node7"}, "node7", "node7 4243 pid 1234"},
		{"requeued", []string{"SLURM_JOB_ID=4300", "SLURM_ARRAY_JOB_ID=4242", "SLURM_ARRAY_TASK_ID=17", "SLURMD_NODENAME=node7", "SLURM_RESTART_COUNT=2"}, "x", "node7 4242_17 restart 2 pid 1234"},
		{"rank 3 of a step", []string{"SLURM_JOB_ID=4244", "SLURMD_NODENAME=node7", "SLURM_PROCID=3"}, "x", "node7 4244 proc 3 pid 1234"},
		{"emulated node differs from host", []string{"SLURM_JOB_ID=9", "SLURMD_NODENAME=vmn2"}, "vm", "vmn2 9 pid 1234"},
		{"salloc shell: host stands in for the node", []string{"SLURM_JOB_ID=9"}, "login1", "login1 9 pid 1234"},
		{"outside Slurm", nil, "laptop", "laptop pid 1234"},
		{"host with space and newline", nil, "my\nlap top", "my?lap?top pid 1234"},
		{"no host", nil, "", "unknown-host pid 1234"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			me, err := NewMe(envOf(tc.env...), tc.host, 1234)
			if err != nil {
				t.Fatalf("NewMe: %v", err)
			}
			if got := me.Who(); got != tc.want {
				t.Errorf("Who() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelf(t *testing.T) {
	for _, k := range []string{"SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT", "SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID"} {
		t.Setenv(k, "")
	}
	me, err := Self()
	if err != nil {
		t.Fatalf("Self: %v", err)
	}
	if me.InJob || me.PID == 0 || me.Host == "" {
		t.Errorf("Self() = %+v, want outside a job with a host and a pid", me)
	}
	if !strings.HasSuffix(me.Who(), " pid "+strconv.Itoa(me.PID)) {
		t.Errorf("Who() = %q, want it to end in the pid %d", me.Who(), me.PID)
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		in      string
		want    Ref
		wantErr bool
	}{
		{in: "4242", want: Ref{Job: 4242}},
		{in: "4242_17", want: Ref{Job: 4242, Task: 17, IsTask: true}},
		{in: "4242_0", want: Ref{Job: 4242, Task: 0, IsTask: true}},
		{in: "", wantErr: true},
		{in: "0", wantErr: true},
		{in: "4242_", wantErr: true},
		{in: "_1", wantErr: true},
		{in: "4242_[0-3]", wantErr: true},
		{in: "4242_1_2", wantErr: true},
		{in: "4242.batch", wantErr: true},
		{in: "4242_4000001", wantErr: true},
		{in: "04242", wantErr: true},
		{in: "4242_07", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRef(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseRef(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got != tc.want {
				t.Errorf("ParseRef(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if s := got.String(); s != tc.in {
				t.Errorf("ParseRef(%q).String() = %q, want the input", tc.in, s)
			}
		})
	}
}

func TestJobJSONRoundTrip(t *testing.T) {
	j, _, err := FromEnv(envOf(batchEnv...))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"array_job_id":"1"`) {
		t.Errorf("json = %s, want snake_case keys and ids as text", b)
	}
	var back Job
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("Unmarshal(%s): %v", b, err)
	}
	if back != j {
		t.Errorf("round trip = %+v, want %+v", back, j)
	}
	var bad Job
	if err := json.Unmarshal([]byte(`{"id":"x"}`), &bad); err == nil {
		t.Errorf("Unmarshal of a malformed id succeeded")
	}
}

// FuzzFromEnv feeds environments written as KEY=VALUE lines. Whatever
// FromEnv accepts must give a Who that is one line of printable text.
func FuzzFromEnv(f *testing.F) {
	for _, tc := range fromEnvCases {
		f.Add(strings.Join(tc.env, "\n"), "host")
	}
	f.Add("SLURM_JOB_ID=1\nSLURMD_NODENAME=\u00e9\u200b", "h\u0000st")
	f.Fuzz(func(t *testing.T, env, host string) {
		me, err := NewMe(envOf(strings.Split(env, "\n")...), host, 42)
		if err != nil {
			return
		}
		who := me.Who()
		for _, r := range who {
			if !unicode.IsPrint(r) {
				t.Fatalf("Who() = %q has unprintable %q", who, r)
			}
		}
		if me.InJob && !strings.Contains(who, " "+me.Job.Ref().String()+" ") {
			t.Fatalf("Who() = %q lacks the job %s", who, me.Job.Ref())
		}
		back, err := ParseRef(me.Job.Ref().String())
		if me.InJob && (err != nil || !reflect.DeepEqual(back, me.Job.Ref())) {
			t.Fatalf("ParseRef(%q) = %+v, %v; want %+v", me.Job.Ref().String(), back, err, me.Job.Ref())
		}
	})
}
