package slowfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// newRoot returns the root of a loopback of backing whose files are
// served through FUSE, read and write included. go-fuse's loopback hands
// the kernel the backing file (FUSE passthrough, Linux 6.9 and later,
// when root), after which reads and writes, and so the work of a file
// server, bypass the filesystem: measured, an echo into a file sent no
// WRITE. A file server sees every write; so does this harness.
func newRoot(backing string) (fs.InodeEmbedder, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	return &node{root.(*fs.LoopbackNode)}, nil
}

// node is a loopback node whose open files refuse passthrough, as are
// its children (WrapChild).
type node struct {
	*fs.LoopbackNode
}

var (
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeWrapChilder = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &node{ln}
	}
	return ops
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return served(fh), fl, errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, served(fh), fl, errno
}

// servedFile is a loopback file that declines passthrough.
type servedFile struct {
	*fs.LoopbackFile
}

// PassthroughFd declines: see newRoot.
func (servedFile) PassthroughFd() (int, bool) { return -1, false }

func served(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return servedFile{lf}
	}
	return fh
}
