// Package atomicfile replaces files so that a reader (Envoy watching a directory, the kubelet reading
// its manifests) sees the old content or the new, never a half-written file, and a symlink planted at
// the temporary name is refused instead of followed. Both skewgate's writers use it: `skewgate
// bootstrap` (Envoy's bootstrap and SDS files) and `skewgate kubeadm install`.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// TempName is where a file is written before it is renamed over name. It starts with a dot: the
// kubelet reads no hidden file of its manifests directory (pkg/kubelet/config/file.go globs
// "[^.]*"), and Envoy reloads a watched file on the rename only.
func TempName(name string) string { return "." + name + ".tmp" }

// WriteAt replaces name in dirfd by a new file with data and mode: written under TempName (created
// with O_EXCL|O_NOFOLLOW, so a symlink planted there makes it fail instead of being followed),
// chmodded before anything is written, synced, then renamed over name (which replaces the name
// itself, whatever it is, never what a symlink there points at). path names the file in errors.
func WriteAt(dirfd int, name, path string, data []byte, mode os.FileMode) error {
	tmp := TempName(name)
	if err := unix.Unlinkat(dirfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", filepath.Join(filepath.Dir(path), tmp), err)
	}
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Join(filepath.Dir(path), tmp), err)
	}
	f := os.NewFile(uintptr(fd), path)
	renamed := false
	defer func() {
		if !renamed {
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	// Chmod before writing: a key is never readable by others, not even while it is written.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("renaming into %s: %w", path, err)
	}
	renamed = true
	return nil
}

// WriteFile is WriteAt for path, in its directory (opened as it is, symlinks in the directory's own
// path followed: the operator chose it).
func WriteFile(path string, data []byte, mode os.FileMode) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dirfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer unix.Close(dirfd)
	return WriteAt(dirfd, name, path, data, mode)
}
