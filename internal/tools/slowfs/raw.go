// The methods below are fuse.RawFileSystem's (go-fuse v2.12.1), each wrapped the
// same way; keep them in step with that interface when go-fuse is updated.

package slowfs

import (
	"fmt"
	"io"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// slowRaw is the counting, delaying layer: every request the kernel sends
// passes through one of its methods, which counts the request by kind and,
// for a metadata operation, waits the delay before passing it on.
type slowRaw struct {
	fuse.RawFileSystem
	count *counter
	delay time.Duration

	trace   io.Writer // nil: no trace
	traceMu sync.Mutex
	paths   map[uint64]string // node id -> path, learned from replies (trace only)
}

var _ fuse.RawFileSystem = (*slowRaw)(nil)

// stale turns ENOENT into ESTALE for a request on a node (not on a
// name in a folder): the node's file was removed or replaced since the
// kernel looked it up. go-fuse's loopback reaches a node's file by its
// path and so answers ENOENT, where an NFS server answers ESTALE for a
// file handle whose file is gone; and Linux treats the two differently:
// on ESTALE a path-based call (open, stat) looks the path up again
// (LOOKUP_REVAL), as NFS clients rely on, while ENOENT reaches the
// program. Measured: without this, Resolve of a name that a rename
// rebinds all the time read "not found" here, which NFS never answers.
func stale(st fuse.Status) fuse.Status {
	if st == fuse.ENOENT {
		return fuse.Status(syscall.ESTALE)
	}
	return st
}

// path returns the path of node id as learned from replies; traceMu held.
func (r *slowRaw) path(id uint64) string {
	if id == fuse.FUSE_ROOT_ID {
		return "/"
	}
	if p, ok := r.paths[id]; ok {
		return p
	}
	return fmt.Sprintf("node%d", id)
}

// learn records that name in node parent is node id (trace only).
func (r *slowRaw) learn(st fuse.Status, parent uint64, name string, id uint64) {
	if r.trace == nil {
		return
	}
	if !st.Ok() {
		r.traceMu.Lock()
		fmt.Fprintf(r.trace, "= %v\n", st)
		r.traceMu.Unlock()
		return
	}
	r.traceMu.Lock()
	defer r.traceMu.Unlock()
	if r.paths == nil {
		r.paths = map[uint64]string{}
	}
	r.paths[id] = path.Join(r.path(parent), name)
}

// Extended attributes are not supported (ENOSYS), as on an NFSv3 mount.

// op counts one request of kind k, on the node of h and (for requests
// that name one) the name name in it, traces it, and waits the delay if k
// is metadata.
func (r *slowRaw) op(k string, h *fuse.InHeader, name string) {
	r.count.add(k)
	if r.trace != nil {
		r.traceMu.Lock()
		p := "?"
		if h != nil {
			p = r.path(h.NodeId)
		}
		if name != "" {
			p += " " + name
		}
		fmt.Fprintf(r.trace, "%s %s\n", k, p)
		r.traceMu.Unlock()
	}
	if r.delay > 0 && Metadata(k) {
		time.Sleep(r.delay)
	}
}

func (r *slowRaw) Forget(nodeid, nlookup uint64) {
	r.op("FORGET", nil, "")
	r.RawFileSystem.Forget(nodeid, nlookup)
}

func (r *slowRaw) Release(cancel <-chan struct{}, input *fuse.ReleaseIn) {
	r.op("RELEASE", &input.InHeader, "")
	r.RawFileSystem.Release(cancel, input)
}

func (r *slowRaw) ReleaseDir(input *fuse.ReleaseIn) {
	r.op("RELEASEDIR", &input.InHeader, "")
	r.RawFileSystem.ReleaseDir(input)
}

func (r *slowRaw) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	r.op("LOOKUP", header, name)
	st := r.RawFileSystem.Lookup(cancel, header, name, out)
	r.learn(st, (header).NodeId, name, out.NodeId)
	return st
}

func (r *slowRaw) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.op("GETATTR", &input.InHeader, "")
	return stale(r.RawFileSystem.GetAttr(cancel, input, out))
}

func (r *slowRaw) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.op("SETATTR", &input.InHeader, "")
	return stale(r.RawFileSystem.SetAttr(cancel, input, out))
}

func (r *slowRaw) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	r.op("MKNOD", &input.InHeader, name)
	st := r.RawFileSystem.Mknod(cancel, input, name, out)
	r.learn(st, (&input.InHeader).NodeId, name, out.NodeId)
	return st
}

func (r *slowRaw) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	r.op("MKDIR", &input.InHeader, name)
	st := r.RawFileSystem.Mkdir(cancel, input, name, out)
	r.learn(st, (&input.InHeader).NodeId, name, out.NodeId)
	return st
}

func (r *slowRaw) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	r.op("UNLINK", header, name)
	return r.RawFileSystem.Unlink(cancel, header, name)
}

func (r *slowRaw) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	r.op("RMDIR", header, name)
	return r.RawFileSystem.Rmdir(cancel, header, name)
}

func (r *slowRaw) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	r.op("RENAME", &input.InHeader, oldName+" -> "+newName)
	return r.RawFileSystem.Rename(cancel, input, oldName, newName)
}

func (r *slowRaw) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	r.op("LINK", &input.InHeader, filename)
	st := r.RawFileSystem.Link(cancel, input, filename, out)
	r.learn(st, (&input.InHeader).NodeId, filename, out.NodeId)
	return st
}

func (r *slowRaw) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	r.op("SYMLINK", header, linkName)
	st := r.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
	r.learn(st, (header).NodeId, linkName, out.NodeId)
	return st
}

func (r *slowRaw) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	r.op("READLINK", header, "")
	b, st := r.RawFileSystem.Readlink(cancel, header)
	return b, stale(st)
}

func (r *slowRaw) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	r.op("ACCESS", &input.InHeader, "")
	return stale(r.RawFileSystem.Access(cancel, input))
}

func (r *slowRaw) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	r.op("GETXATTR", header, "")
	return 0, fuse.ENOSYS
}

func (r *slowRaw) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	r.op("LISTXATTR", header, "")
	return 0, fuse.ENOSYS
}

func (r *slowRaw) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	r.op("SETXATTR", &input.InHeader, "")
	return fuse.ENOSYS
}

func (r *slowRaw) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	r.op("REMOVEXATTR", header, "")
	return fuse.ENOSYS
}

func (r *slowRaw) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	r.op("CREATE", &input.InHeader, name)
	st := r.RawFileSystem.Create(cancel, input, name, out)
	r.learn(st, (&input.InHeader).NodeId, name, out.NodeId)
	return st
}

func (r *slowRaw) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	r.op("TMPFILE", &input.InHeader, "")
	return r.RawFileSystem.Tmpfile(cancel, input, out)
}

func (r *slowRaw) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	r.op("OPEN", &input.InHeader, "")
	return stale(r.RawFileSystem.Open(cancel, input, out))
}

func (r *slowRaw) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	r.op("READ", &input.InHeader, "")
	return r.RawFileSystem.Read(cancel, input, buf)
}

func (r *slowRaw) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	r.op("LSEEK", &in.InHeader, "")
	return r.RawFileSystem.Lseek(cancel, in, out)
}

func (r *slowRaw) GetLk(cancel <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	r.op("GETLK", &input.InHeader, "")
	return r.RawFileSystem.GetLk(cancel, input, out)
}

func (r *slowRaw) SetLk(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	r.op("SETLK", &input.InHeader, "")
	return r.RawFileSystem.SetLk(cancel, input)
}

func (r *slowRaw) SetLkw(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	r.op("SETLKW", &input.InHeader, "")
	return r.RawFileSystem.SetLkw(cancel, input)
}

func (r *slowRaw) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	r.op("WRITE", &input.InHeader, "")
	return r.RawFileSystem.Write(cancel, input, data)
}

// Writev counts a WRITE unless the layer below does not implement it, in
// which case the server calls Write, which counts it.
func (r *slowRaw) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := r.RawFileSystem.Writev(cancel, input, data)
	if st != fuse.ENOSYS {
		r.op("WRITE", &input.InHeader, "")
	}
	return n, st
}

func (r *slowRaw) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	r.op("COPY_FILE_RANGE", &input.InHeader, "")
	return r.RawFileSystem.CopyFileRange(cancel, input)
}

func (r *slowRaw) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	r.op("IOCTL", &input.InHeader, "")
	return r.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf)
}

func (r *slowRaw) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	r.op("FLUSH", &input.InHeader, "")
	return r.RawFileSystem.Flush(cancel, input)
}

func (r *slowRaw) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	r.op("FSYNC", &input.InHeader, "")
	return stale(r.RawFileSystem.Fsync(cancel, input))
}

func (r *slowRaw) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	r.op("FALLOCATE", &input.InHeader, "")
	return r.RawFileSystem.Fallocate(cancel, input)
}

func (r *slowRaw) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	r.op("OPENDIR", &input.InHeader, "")
	return stale(r.RawFileSystem.OpenDir(cancel, input, out))
}

func (r *slowRaw) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	r.op("READDIR", &input.InHeader, "")
	return r.RawFileSystem.ReadDir(cancel, input, out)
}

func (r *slowRaw) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	r.op("READDIRPLUS", &input.InHeader, "")
	return r.RawFileSystem.ReadDirPlus(cancel, input, out)
}

func (r *slowRaw) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	r.op("FSYNCDIR", &input.InHeader, "")
	return stale(r.RawFileSystem.FsyncDir(cancel, input))
}

func (r *slowRaw) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	r.op("STATFS", input, "")
	return r.RawFileSystem.StatFs(cancel, input, out)
}

func (r *slowRaw) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	r.op("STATX", &input.InHeader, "")
	return stale(r.RawFileSystem.Statx(cancel, input, out))
}
