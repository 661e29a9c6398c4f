package dataplane

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMovedTo calls fire when a file is moved into one of dirs (any name) or onto one of files,
// using inotify IN_MOVED_TO like Envoy's Filesystem::WatcherImpl (source/common/filesystem/
// inotify/watcher_impl.cc: addWatch(path, Events::MovedTo) watches the directory and matches the
// file name; a path ending in "/" matches every name). Writes in place, creations and deletions
// are not moves and fire nothing. It returns a function that stops the watch.
func watchMovedTo(ctx context.Context, dirs, files []string, fire func()) (stop func()) {
	if len(dirs)+len(files) == 0 {
		return func() {}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return func() {}
	}
	type watch struct {
		any   bool
		names map[string]bool
	}
	byDir := map[string]*watch{}
	for _, d := range dirs {
		byDir[cleanDir(d)] = &watch{any: true}
	}
	for _, f := range files {
		dir, base := filepath.Split(f)
		w := byDir[cleanDir(dir)]
		if w == nil {
			w = &watch{names: map[string]bool{}}
			byDir[cleanDir(dir)] = w
		}
		if w.names != nil {
			w.names[base] = true
		}
	}
	byWD := map[int32]*watch{}
	for dir, w := range byDir {
		wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO)
		if err == nil {
			byWD[int32(wd)] = w
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unix.Close(fd)
		buf := make([]byte, 64*1024)
		for ctx.Err() == nil {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(pfd, 100); n <= 0 {
				continue
			}
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				continue
			}
			matched := false
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name := string(bytes.TrimRight(nameBytes, "\x00"))
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if w := byWD[ev.Wd]; w != nil && ev.Mask&unix.IN_MOVED_TO != 0 && (w.any || w.names[name]) {
					matched = true
				}
			}
			if matched {
				fire()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}
