package kubeadm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/internal/atomicfile"
)

// The install writes and chmods only through descriptors: each of its directories is opened with
// O_NOFOLLOW relative to the descriptor of the planned directory it is in, each file relative to its
// directory's, and modes are set with fchmod on what was opened. A symlink anywhere under
// --config-dir, --socket-dir or in --manifests-dir, at a name the install uses, is refused instead
// of followed: whoever planted it would otherwise choose where the keys go or which file gets
// chmodded. The directories a planned top directory is in (/etc, /var/lib) are the operator's and
// are followed, and so is --manifests-dir itself, as the kubelet follows it (kubeadm's directory; a
// symlinked file name inside it is still refused).

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC

// fileID identifies an inode, so that what is chmodded is what was inspected.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), uint64(st.Ino)} }

// tempName is where a file is written before it is renamed over name (atomicfile.WriteAt).
func tempName(name string) string { return atomicfile.TempName(name) }

// openDir opens the directory name in dirfd (an absolute path with unix.AT_FDCWD) without following
// a symlink at name unless follow. fd is -1 when it does not exist.
func openDir(dirfd int, name, path string, follow bool) (fd int, err error) {
	flags := dirFlags | unix.O_NOFOLLOW
	if follow {
		flags = dirFlags
	}
	fd, err = unix.Openat(dirfd, name, flags, 0)
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ENOENT):
		return -1, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, notPlain(dirfd, name, path, "directory", err)
	}
	return -1, fmt.Errorf("%s: %w", path, err)
}

// notPlain explains why name in dirfd, found to be no plain directory or regular file (want), is
// refused.
func notPlain(dirfd int, name, path, want string, cause error) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if cause == nil {
			cause = err
		}
		return fmt.Errorf("%s: %w", path, cause)
	}
	if uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, unix.PathMax)
		n, _ := unix.Readlinkat(dirfd, name, buf)
		return fmt.Errorf("refusing %s: it is a symbolic link (to %q), and the install writes only through a real %s of its own: remove the link", path, buf[:max(n, 0)], want)
	}
	return fmt.Errorf("refusing %s: it exists and is not a %s (%s): remove it", path, want, fileType(uint32(st.Mode)))
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// openRegular opens name in dirfd for reading if it is a regular file, without following a symlink:
// f is nil when there is none. Anything else at name is refused.
func openRegular(dirfd int, name, path string) (*os.File, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, notPlain(dirfd, name, path, "regular file", nil)
	}
	// O_NONBLOCK: should a named pipe replace the file after the check, opening it does not hang.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, notPlain(dirfd, name, path, "regular file", err)
	}
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil || uint32(got.Mode)&unix.S_IFMT != unix.S_IFREG || idOf(&got) != idOf(&st) {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("refusing %s: it was replaced while it was inspected", path)
	}
	return os.NewFile(uintptr(fd), path), &got, nil
}

// inspectFile compares the file name in dirfd with what the install would write: "create",
// "update", "chmod" or "unchanged". A symlink or anything but a regular file there is refused; a
// regular file with more than one link is replaced by a rename (a chmod would change the other
// name's file as well).
func inspectFile(dirfd int, name, path string, want []byte, mode os.FileMode) (action string, id fileID, err error) {
	f, st, err := openRegular(dirfd, name, path)
	if err != nil || f == nil {
		return "create", id, err
	}
	defer f.Close()
	id = idOf(st)
	if uint64(st.Nlink) != 1 || st.Size != int64(len(want)) {
		return "update", id, nil
	}
	got, err := io.ReadAll(io.LimitReader(f, int64(len(want))+1))
	if err != nil {
		return "", id, fmt.Errorf("%s: %w", path, err)
	}
	if !bytes.Equal(got, want) {
		return "update", id, nil
	}
	if uint32(st.Mode)&0o7777 != uint32(mode.Perm()) {
		return "chmod", id, nil
	}
	return "unchanged", id, nil
}

// checkTemp refuses a symlink or anything but a regular file at the temporary name the install
// writes a file under. A regular file there is what an interrupted run left; it is replaced.
func checkTemp(dirfd int, name, path string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	case uint32(st.Mode)&unix.S_IFMT != unix.S_IFREG:
		return notPlain(dirfd, name, path, "regular file", nil)
	}
	return nil
}

// readOwned reads dir/names..., a file the install wrote, opening every part the way Apply does:
// no symlink is followed below dir, nor at dir itself. It returns os.ErrNotExist when a part is
// absent, and reads at most limit bytes (a larger file is an error).
func readOwned(dir string, limit int64, names ...string) ([]byte, error) {
	fd, err := openDir(unix.AT_FDCWD, dir, dir, false)
	path := dir
	for _, name := range names[:len(names)-1] {
		if err != nil || fd < 0 {
			break
		}
		path = filepath.Join(path, name)
		next, nextErr := openDir(fd, name, path, false)
		unix.Close(fd)
		fd, err = next, nextErr
	}
	if err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, os.ErrNotExist
	}
	defer unix.Close(fd)
	name := names[len(names)-1]
	path = filepath.Join(path, name)
	f, _, err := openRegular(fd, name, path)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, os.ErrNotExist
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}

// writeAt replaces name in dirfd by a new file with data and mode, through a temporary name
// refused if it is a symlink, synced, then renamed (atomicfile.WriteAt).
func writeAt(dirfd int, name, path string, data []byte, mode os.FileMode) error {
	return atomicfile.WriteAt(dirfd, name, path, data, mode)
}

// chmodAt sets the mode of name in dirfd, the file inspected as id, through its descriptor.
func chmodAt(dirfd int, name, path string, id fileID, mode os.FileMode) error {
	f, st, err := openRegular(dirfd, name, path)
	if err != nil {
		return err
	}
	if f == nil || idOf(st) != id || uint64(st.Nlink) != 1 {
		if f != nil {
			f.Close()
		}
		return fmt.Errorf("refusing to chmod %s: it was replaced since it was inspected", path)
	}
	defer f.Close()
	return f.Chmod(mode.Perm())
}
