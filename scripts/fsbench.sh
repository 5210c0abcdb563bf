# fsbench.sh: sourced by the benchmark scripts that measure file-system
# work (bench-trial.sh, bench-place.sh); not run on its own.
#
# Why: this project's test VMs have ext4 without a journal, where the
# kernel's inode allocator skips, one by one, every inode deleted in the
# last minute (recently_deleted()), so a file creation costs up to ten
# times more, depending on what the machine deleted lately. Most Linux
# machines and NFS servers have a journal. So these scripts print a table
# for their folder and, as root, another on a fresh journaled ext4 image
# on the same disk; both are real, neither is the whole story.
#
#   fsinfo DIR              the file system under DIR ("ext4 without a journal", "tmpfs"...)
#   fsbench_ext4 TOP NAME   make TOP/ext4.img and loop-mount it on a new folder,
#                           $fsbench_mnt (call it directly, not in $(...): the
#                           variable must reach the caller); on failure say why
#                           (NAME: the script) on stderr and return 1.
#   fsbench_cleanup         unmount it (for the caller's EXIT trap).

fsbench_mnt=

fsinfo() {
	local d=$1 t dev
	t=$(stat -f -c %T "$d")
	dev=$(basename "$(df --output=source "$d" | tail -1)")
	if [ "$t" = ext2/ext3 ] && [ -d "/proc/fs/ext4/$dev" ]; then
		if ls /proc/fs/jbd2 2>/dev/null | grep -q "^$dev-"; then
			echo "ext4 with a journal"
		else
			echo "ext4 without a journal"
		fi
	else
		echo "$t"
	fi
}

fsbench_ext4() {
	local top=$1 name=$2
	if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null; then
		echo "$name: no journaled ext4 table: it needs root and mkfs.ext4 to loop-mount an image" >&2
		return 1
	fi
	fsbench_mnt=$(mktemp -d)
	if truncate -s 2G "$top/ext4.img" && mkfs.ext4 -q -F "$top/ext4.img" && mount -o loop "$top/ext4.img" "$fsbench_mnt"; then
		return 0
	fi
	echo "$name: no journaled ext4 table: could not make and loop-mount an image (a container without loop devices?)" >&2
	rmdir "$fsbench_mnt" 2>/dev/null || true
	fsbench_mnt=
	return 1
}

fsbench_cleanup() {
	if [ -n "$fsbench_mnt" ]; then
		umount "$fsbench_mnt" 2>/dev/null || true
		rmdir "$fsbench_mnt" 2>/dev/null || true
	fi
}
