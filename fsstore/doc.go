// Package fsstore is soma's store: a plain folder, usually on a shared
// filesystem (NFS, Lustre, GPFS or a laptop's disk), that holds
// content-addressed blobs and names that point at them.
//
// Layout under the root (format version FormatVersion):
//
//	soma.json                     format marker: {"format":"soma-store","version":1}
//	blobs/sha256/<2 hex>/<62 hex> immutable blobs, addressed by their SHA-256
//	names/<seg>/<seg>/.../<leaf>  one small text record per name (digest + meta)
//	tmp/<host>.<pid>.<random>/    one folder per process (Store) of unique
//	                              temp files; every write starts there
//
// Every write goes through one recipe: a unique temp file in the process's
// folder under tmp/ (a folder each, so that the processes of a node do not
// queue on one folder's lock: see tmpDir), written,
// fsynced and closed (errors of both checked, since NFS reports ENOSPC and
// EDQUOT only there), then published by link(2) (Claim, and blobs) or
// rename(2) (Bind), then the directory is fsynced. A reader therefore never
// sees a half-written record or blob, even if the writer is killed with
// SIGKILL at any instant; a crash leaves at worst a temp file, which GC
// removes.
//
// No write follows a symbolic link inside the root, and no read does
// either: every path below the root is resolved from an open descriptor
// of the root with openat2's RESOLVE_NO_SYMLINKS (or, without openat2, one
// O_NOFOLLOW component at a time), and a write happens relative to its
// folder's descriptor, which is then fsynced (see beneath.go). A link (or
// special file) where a record, a blob or a folder belongs reads as a
// *CorruptError wrapping ErrForeign, with its path; Scan reports it among
// the corrupt records and never descends into it, so GC collects no blob
// while one exists. The root itself may be reached through a link.
//
// Names are '/'-separated segments. Each segment is 1 to 255 bytes of
// ASCII letters, digits and "-_.+@=", and must not start with '.' (which
// excludes ".", "..", hidden files and NFS's ".nfsXXXX" silly renames). A
// name is at most 1024 bytes. A name is a leaf: "a/b" and "a/b/c" cannot
// both be bound.
//
// Times come from the file server: a Bound's Time is the mtime the server
// stamped on the record, read with open+fstat (a bare stat may be served
// from the NFS attribute cache, up to 60 s old), and Now touches a probe
// file and reads its mtime. A client's clock is never used.
//
// Sealed records: Seal binds a name for the last time (a trial attempt
// that ended its trial) and marks its file with the owner-execute bit, the
// one mode bit no other record file has; Probe reads it with one lstat,
// so a reader that only needs to know "ended" skips the open and read. It
// is a hint on top of the format, not part of it: old records and stores
// without it read as before, and on a filesystem that shows every file as
// executable (FAT, CIFS, WSL's drvfs) Probe notices once and never
// reports Sealed.
//
// Sharing a root with a group: files are created with mode 0666 (a sealed
// record 0766) and folders with 0777, all reduced by the process umask. For a study shared
// by a Unix group, create the root with the group's ownership and the
// setgid bit (chgrp lab /scratch/soma && chmod 2775 /scratch/soma) and run
// soma with umask 002; every file and folder below then belongs to the
// group and is writable by it.
//
// A Store is safe for concurrent use by many goroutines and, through the
// filesystem, by many processes on many machines.
package fsstore
