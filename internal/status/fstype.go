package status

import "fmt"

// FS describes the filesystem a root lives on, as far as watching it is
// concerned.
type FS struct {
	// Name is the filesystem's type ("ext4", "nfs", "lustre"...), or
	// "0x..." for a magic number this table does not know.
	Name  string
	Magic int64
	// Network is true for filesystems shared over a network (NFS, Lustre,
	// GPFS, CIFS, Ceph, BeeGFS, FUSE mounts such as sshfs...): inotify sees
	// only this machine's changes there, never another node's, so a watch
	// must poll.
	Network bool
	// Known reports whether Magic is in the table.
	Known bool
}

func (f FS) String() string {
	if f.Network {
		return f.Name + " (network filesystem)"
	}
	return f.Name
}

// Filesystem magic numbers, from statfs(2) and linux/magic.h; the
// network ones also from the Lustre (LL_SUPER_MAGIC), GPFS and BeeGFS
// sources.
var fsMagics = []struct {
	magic   int64
	name    string
	network bool
}{
	{0x6969, "nfs", true},
	{0x0BD00BD0, "lustre", true},
	{0x47504653, "gpfs", true},
	{0xFF534D42, "cifs", true},
	{0xFE534D42, "smb2", true},
	{0x517B, "smb", true},
	{0x00C36400, "ceph", true},
	{0x19830326, "beegfs", true},
	{0x65735546, "fuse", true},
	{0x01021997, "9p", true},
	{0x5346414F, "afs", true},
	{0x6B414653, "afs", true},
	{0xAAD7AAEA, "panfs", true},
	{0x564C, "ncp", true},
	{0x73757245, "coda", true},
	{0x013111A8, "ibrix", true},
	{0xEF53, "ext4", false},
	{0x58465342, "xfs", false},
	{0x9123683E, "btrfs", false},
	{0x01021994, "tmpfs", false},
	{0x794C7630, "overlayfs", false},
	{0x2FC12FC1, "zfs", false},
	{0xF2F52010, "f2fs", false},
	{0x858458F6, "ramfs", false},
	{0x3434, "nilfs", false},
	{0x4D44, "vfat", false},
	{0x5346544E, "ntfs", false},
	{0x2011BAB0, "exfat", false},
	{0x6E736673, "nsfs", false},
}

// fsByMagic classifies a statfs f_type.
func fsByMagic(magic int64) FS {
	m := magic & 0xFFFFFFFF
	for _, e := range fsMagics {
		if e.magic == m {
			return FS{Name: e.name, Magic: m, Network: e.network, Known: true}
		}
	}
	return FS{Name: fmt.Sprintf("0x%X", m), Magic: m}
}
