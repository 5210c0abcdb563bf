// The methods below are fuse.RawFileSystem's (go-fuse v2.12.1), each wrapped the
// same way; keep them in step with that interface when go-fuse is updated.

package slowfs

import (
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
}

var _ fuse.RawFileSystem = (*slowRaw)(nil)

// Extended attributes are not supported (ENOSYS), as on an NFSv3 mount.

// op counts one request of kind k and waits the delay if k is metadata.
func (r *slowRaw) op(k string) {
	r.count.add(k)
	if r.delay > 0 && Metadata(k) {
		time.Sleep(r.delay)
	}
}

func (r *slowRaw) Forget(nodeid, nlookup uint64) {
	r.op("FORGET")
	r.RawFileSystem.Forget(nodeid, nlookup)
}

func (r *slowRaw) Release(cancel <-chan struct{}, input *fuse.ReleaseIn) {
	r.op("RELEASE")
	r.RawFileSystem.Release(cancel, input)
}

func (r *slowRaw) ReleaseDir(input *fuse.ReleaseIn) {
	r.op("RELEASEDIR")
	r.RawFileSystem.ReleaseDir(input)
}

func (r *slowRaw) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	r.op("LOOKUP")
	return r.RawFileSystem.Lookup(cancel, header, name, out)
}

func (r *slowRaw) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.op("GETATTR")
	return r.RawFileSystem.GetAttr(cancel, input, out)
}

func (r *slowRaw) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	r.op("SETATTR")
	return r.RawFileSystem.SetAttr(cancel, input, out)
}

func (r *slowRaw) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	r.op("MKNOD")
	return r.RawFileSystem.Mknod(cancel, input, name, out)
}

func (r *slowRaw) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	r.op("MKDIR")
	return r.RawFileSystem.Mkdir(cancel, input, name, out)
}

func (r *slowRaw) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	r.op("UNLINK")
	return r.RawFileSystem.Unlink(cancel, header, name)
}

func (r *slowRaw) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	r.op("RMDIR")
	return r.RawFileSystem.Rmdir(cancel, header, name)
}

func (r *slowRaw) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) fuse.Status {
	r.op("RENAME")
	return r.RawFileSystem.Rename(cancel, input, oldName, newName)
}

func (r *slowRaw) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) fuse.Status {
	r.op("LINK")
	return r.RawFileSystem.Link(cancel, input, filename, out)
}

func (r *slowRaw) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) fuse.Status {
	r.op("SYMLINK")
	return r.RawFileSystem.Symlink(cancel, header, pointedTo, linkName, out)
}

func (r *slowRaw) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	r.op("READLINK")
	return r.RawFileSystem.Readlink(cancel, header)
}

func (r *slowRaw) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	r.op("ACCESS")
	return r.RawFileSystem.Access(cancel, input)
}

func (r *slowRaw) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	r.op("GETXATTR")
	return 0, fuse.ENOSYS
}

func (r *slowRaw) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	r.op("LISTXATTR")
	return 0, fuse.ENOSYS
}

func (r *slowRaw) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	r.op("SETXATTR")
	return fuse.ENOSYS
}

func (r *slowRaw) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) fuse.Status {
	r.op("REMOVEXATTR")
	return fuse.ENOSYS
}

func (r *slowRaw) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	r.op("CREATE")
	return r.RawFileSystem.Create(cancel, input, name, out)
}

func (r *slowRaw) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	r.op("TMPFILE")
	return r.RawFileSystem.Tmpfile(cancel, input, out)
}

func (r *slowRaw) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	r.op("OPEN")
	return r.RawFileSystem.Open(cancel, input, out)
}

func (r *slowRaw) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	r.op("READ")
	return r.RawFileSystem.Read(cancel, input, buf)
}

func (r *slowRaw) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	r.op("LSEEK")
	return r.RawFileSystem.Lseek(cancel, in, out)
}

func (r *slowRaw) GetLk(cancel <-chan struct{}, input *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	r.op("GETLK")
	return r.RawFileSystem.GetLk(cancel, input, out)
}

func (r *slowRaw) SetLk(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	r.op("SETLK")
	return r.RawFileSystem.SetLk(cancel, input)
}

func (r *slowRaw) SetLkw(cancel <-chan struct{}, input *fuse.LkIn) fuse.Status {
	r.op("SETLKW")
	return r.RawFileSystem.SetLkw(cancel, input)
}

func (r *slowRaw) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	r.op("WRITE")
	return r.RawFileSystem.Write(cancel, input, data)
}

// Writev counts a WRITE unless the layer below does not implement it, in
// which case the server calls Write, which counts it.
func (r *slowRaw) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := r.RawFileSystem.Writev(cancel, input, data)
	if st != fuse.ENOSYS {
		r.op("WRITE")
	}
	return n, st
}

func (r *slowRaw) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	r.op("COPY_FILE_RANGE")
	return r.RawFileSystem.CopyFileRange(cancel, input)
}

func (r *slowRaw) Ioctl(cancel <-chan struct{}, input *fuse.IoctlIn, inbuf []byte, output *fuse.IoctlOut, outbuf []byte) fuse.Status {
	r.op("IOCTL")
	return r.RawFileSystem.Ioctl(cancel, input, inbuf, output, outbuf)
}

func (r *slowRaw) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	r.op("FLUSH")
	return r.RawFileSystem.Flush(cancel, input)
}

func (r *slowRaw) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	r.op("FSYNC")
	return r.RawFileSystem.Fsync(cancel, input)
}

func (r *slowRaw) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) fuse.Status {
	r.op("FALLOCATE")
	return r.RawFileSystem.Fallocate(cancel, input)
}

func (r *slowRaw) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	r.op("OPENDIR")
	return r.RawFileSystem.OpenDir(cancel, input, out)
}

func (r *slowRaw) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	r.op("READDIR")
	return r.RawFileSystem.ReadDir(cancel, input, out)
}

func (r *slowRaw) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	r.op("READDIRPLUS")
	return r.RawFileSystem.ReadDirPlus(cancel, input, out)
}

func (r *slowRaw) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	r.op("FSYNCDIR")
	return r.RawFileSystem.FsyncDir(cancel, input)
}

func (r *slowRaw) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	r.op("STATFS")
	return r.RawFileSystem.StatFs(cancel, input, out)
}

func (r *slowRaw) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	r.op("STATX")
	return r.RawFileSystem.Statx(cancel, input, out)
}
