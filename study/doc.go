// Package study is the library half of distributed hyperparameter
// studies: many processes on many machines search one space together
// through one store (package fsstore), with no server. A trial is a
// number; each process derives a trial's point from that number (and,
// for tpe, the history it reads), and claims the trial by link(2), so
// exactly one process runs it.
//
// The pure half: a Spec (ParseSpec for TOML, SpecFromFlags for flags)
// holds a Space of knobs, a direction, a sampler, a pruner, a budget, a
// seed and a retry limit. Points are written as text
// ("lr=0.001,batch=64") and read back only through their Space.
//
// The store half, for runners (soma-trial) and views (soma status):
//
//	st, err := study.Open(ctx, store, "spam", spec, study.Options{})
//	for {
//		run, err := st.Next(ctx, study.Me(slurmJob))  // or st.Take(ctx, n, who)
//		if errors.Is(err, study.ErrBudgetReached) || errors.Is(err, study.ErrNoWork) {
//			break
//		}
//		// evaluate run.Point(); every st.HeartbeatInterval(): run.Heartbeat(ctx)
//		prune, err := run.Report(ctx, step, value)
//		// ...
//		err = run.Finish(ctx, study.StateDone, score, "")
//	}
//
// On disk (names in the store; they are the on-disk format, which running
// studies depend on, so they change only with a format version):
//
//	study/<study>/spec                  the study record: canonical spec blob, created by claim
//	study/<study>/trial/<n>/<attempt>   one record per attempt, rewritten as it goes
//	study/<study>/point/<digest>        a discrete space's point, claimed by the trial evaluating it
//	study/<study>/pack/<id>             ended trials' final records, packed (Study.Pack)
//	study/<study>/watch/<n>             the watcher role, leased like an attempt (Study.Watch)
//
// An attempt record's meta holds its state, point text, score, direction,
// last step and value, heartbeat counter, failure count, who ran it (host,
// pid, Slurm job) and when it started (file-server time); its digest is a
// blob with the curve and why it stopped. So a sampler's history
// (History, Finished) costs one listing and the records, and no blob;
// a pruner's (Curves) one blob per trial more, and ended trials' blobs are
// cached. Records of ended trials never change: a Study keeps them in
// memory, and Pack copies them into a few pack blobs so a cold reader of
// a large study opens a few files instead of one per trial.
//
// Leases: a running attempt whose record has not been rewritten for the
// grace period, in file-server time, is stale, and any process may retry
// it by claiming the next attempt (exactly one wins). Readers keep each
// trial's highest attempt; the superseded runner learns it from
// Heartbeat, Report or Finish (ErrSuperseded) and what it writes changes
// nothing. Interrupted attempts are always retried, failed ones up to the
// spec's MaxRetries.
//
// The watcher role: at the end of a study, one process keeps watch to
// retry the last trials if they go stale, so that every other runner
// with nothing to claim can leave (Study.Watch). The role is leased like
// an attempt: its holder claims watch/<n> by link(2) and rewrites it
// every HeartbeatInterval; once it is released or stale, the next
// process that looks claims watch/<n+1> (exactly one wins).
//
// A Study is safe for concurrent use; the store makes it safe across
// processes and machines. Records that cannot be read are reported in a
// Snapshot's Corrupt list, never returned as results, and never stop a
// query.
package study
