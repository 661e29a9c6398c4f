package kubeadm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Change is what Apply did (or, in a dry run, would do) to one path.
type Change struct {
	Path   string
	Action string // "create", "update", "chmod" or "unchanged"
}

// Apply carries out plan: directories are created or their mode corrected, and every file whose
// content or mode differs is replaced by a rename in its directory (the kubelet and Envoy never read
// a half-written file). Files that are already right are not touched. With dryRun nothing is
// written; every change is printed to w with its content, private keys redacted.
//
// Everything is inspected before anything is written, so a refusal (a symlink or another user's
// directory where the install writes, see nofollow.go) changes nothing, in a dry run or not.
func Apply(plan *Plan, dryRun bool, w io.Writer) ([]Change, error) {
	t, err := inspect(plan)
	defer t.close()
	if err != nil {
		return nil, err
	}
	var changes []Change
	for _, d := range t.dirs {
		changes = append(changes, Change{d.Path + "/", d.action})
		if dryRun && d.action != "unchanged" {
			fmt.Fprintf(w, "# would %s directory %s (%04o)\n", d.action, d.Path, d.Mode)
		}
	}
	for _, f := range t.files {
		changes = append(changes, Change{f.Path, f.action})
		if dryRun && f.action != "unchanged" {
			data := f.Data
			if f.Secret {
				data = redact(data)
			}
			fmt.Fprintf(w, "# would %s %s (%04o)\n%s", f.action, f.Path, f.Mode, data)
			if len(data) > 0 && data[len(data)-1] != '\n' {
				fmt.Fprintln(w)
			}
		}
	}
	if dryRun {
		return changes, nil
	}
	return changes, t.write()
}

// dirState is a planned directory as inspect found it.
type dirState struct {
	Dir
	// parent is the index of the planned directory it is in, -1 for a top directory (whose own
	// parents are the operator's); name is its name there, or its path for a top directory.
	parent int
	name   string
	fd     int // open until Apply returns; -1 while it does not exist
	action string
}

type fileState struct {
	File
	dir    int // index of its directory
	name   string
	id     fileID // of the existing file
	action string
}

type tree struct {
	dirs  []*dirState
	files []*fileState
}

func (t *tree) close() {
	for _, d := range t.dirs {
		if d.fd >= 0 {
			unix.Close(d.fd)
		}
	}
}

// dirfd is where d is opened or made: its parent's descriptor, or the working directory for a top
// directory's absolute path. ok is false when the parent does not exist yet.
func (t *tree) dirfd(d *dirState) (fd int, ok bool) {
	if d.parent < 0 {
		return unix.AT_FDCWD, true
	}
	p := t.dirs[d.parent]
	return p.fd, p.fd >= 0
}

// inspect opens every planned directory and reads every planned file without following a symlink
// and decides each action. It writes nothing.
func inspect(plan *Plan) (*tree, error) {
	t := &tree{}
	for _, d := range plan.Dirs {
		s := &dirState{Dir: d, parent: -1, name: d.Path, fd: -1, action: "create"}
		for i, p := range t.dirs {
			if filepath.Dir(d.Path) == p.Path {
				s.parent, s.name = i, filepath.Base(d.Path)
			}
		}
		t.dirs = append(t.dirs, s)
		dirfd, ok := t.dirfd(s)
		if !ok {
			continue
		}
		fd, err := openDir(dirfd, s.name, d.Path, d.Foreign && s.parent < 0)
		if err != nil || fd < 0 {
			if err != nil {
				return t, err
			}
			continue
		}
		s.fd = fd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return t, fmt.Errorf("%s: %w", d.Path, err)
		}
		s.action = "unchanged"
		if d.Foreign {
			continue
		}
		// Whoever owns the socket or config directory could replace the sockets or the files the
		// pods read.
		if int(st.Uid) != os.Geteuid() {
			return t, fmt.Errorf("%s belongs to uid %d, not to the user running this command (uid %d): remove it or chown it first", d.Path, st.Uid, os.Geteuid())
		}
		if uint32(st.Mode)&0o7777 != uint32(d.Mode.Perm()) {
			s.action = "chmod"
		}
	}
	for _, f := range plan.Files {
		s := &fileState{File: f, dir: -1, name: filepath.Base(f.Path), action: "create"}
		for i, d := range t.dirs {
			if d.Path == filepath.Dir(f.Path) {
				s.dir = i
			}
		}
		if s.dir < 0 {
			return t, fmt.Errorf("%s is in no directory of the plan", f.Path)
		}
		t.files = append(t.files, s)
		d := t.dirs[s.dir]
		if d.fd < 0 {
			continue
		}
		tmp := tempName(s.name)
		if err := checkTemp(d.fd, tmp, filepath.Join(d.Path, tmp)); err != nil {
			return t, err
		}
		var err error
		if s.action, s.id, err = inspectFile(d.fd, s.name, f.Path, f.Data, f.Mode); err != nil {
			return t, err
		}
	}
	return t, nil
}

// write carries out the actions inspect decided, through the directories' descriptors.
func (t *tree) write() error {
	for _, d := range t.dirs {
		if d.action == "create" {
			if err := t.mkdir(d); err != nil {
				return err
			}
		}
		if d.action != "unchanged" {
			if err := unix.Fchmod(d.fd, uint32(d.Mode.Perm())); err != nil {
				return fmt.Errorf("%s: %w", d.Path, err)
			}
		}
	}
	for _, f := range t.files {
		d := t.dirs[f.dir]
		var err error
		switch f.action {
		case "chmod":
			err = chmodAt(d.fd, f.name, f.Path, f.id, f.Mode)
		case "create", "update":
			err = writeAt(d.fd, f.name, f.Path, f.Data, f.Mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mkdir makes d, which did not exist, and opens it the way inspect would have. A top directory's
// parents are made as well (the operator's part of the path, as os.MkdirAll would).
func (t *tree) mkdir(d *dirState) error {
	dirfd, ok := t.dirfd(d)
	if !ok {
		return fmt.Errorf("%s: its directory was not made", d.Path)
	}
	if d.parent < 0 {
		if err := os.MkdirAll(filepath.Dir(d.Path), d.Mode); err != nil {
			return err
		}
	}
	if err := unix.Mkdirat(dirfd, d.name, uint32(d.Mode.Perm())); err != nil {
		return fmt.Errorf("creating %s: %w", d.Path, err)
	}
	fd, err := openDir(dirfd, d.name, d.Path, d.Foreign && d.parent < 0)
	if err == nil && fd < 0 {
		err = fmt.Errorf("%s: gone right after it was made", d.Path)
	}
	d.fd = fd
	return err
}
