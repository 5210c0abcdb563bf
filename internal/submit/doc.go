// Package submit is the logic behind `soma slurm submit`: it turns a study
// in a store and an objective command into an sbatch array job whose every
// task runs soma-trial, and it remembers the jobs it submitted so that
// `soma status` can show them.
//
// Submit writes the script beside the study, as a plain file outside the
// store's names and blobs, so that it can be read, audited and submitted
// again unchanged (sbatch FILE):
//
//	<root>/slurm/<study>/<yyyymmdd-hhmmss>-<random>.sh   the script, one per submission
//	<root>/slurm/<study>/logs/<array job id>_<task>.out   one Slurm log per array task (%A_%a)
//
// and records each submitted job in the store under the name
//
//	study/<study>/slurm/<job id>
//
// whose digest is the script's bytes as submitted (a blob, so the record
// keeps what ran even if the file is edited later) and whose meta says the
// array, time limit, grace, script path, log folder, who submitted it and
// when (file-server time). Jobs reads those records back and, when squeue
// answers, the tasks' live states; Slurm's absence is reported in the
// result (JobList.LiveErr), never as a failure of the query.
//
// Submit creates the study (from Options.Spec) before it calls sbatch, and
// the script runs soma-trial without --spec: every task joins the study
// that exists. A spec file edited after submission can therefore not make
// pending tasks fail with a spec mismatch hours later, and a mismatch with
// an existing study is refused at submission, not in 64 task logs.
package submit
