//go:build linux

package filestore_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkFloor is what the file system itself charges for a durable
// 512-byte write, with none of the store's work around it: the bound
// docs/design.md#storage-adapters ("A log-structured store") reasons from. FilePerKey
// is the least a record in a file of its own needs (create a temporary
// file, write, close, rename, and a share of one syncfs per 8 writes
// of each of 8 writers; no-sync is the metadata work alone); Log appends to one file shared by the writers
// and makes it durable with one fdatasync per batch. cpu-µs/op is the
// process's CPU time per write, the kernel's work included.
func BenchmarkFloor(b *testing.B) {
	value := make([]byte, 512)
	for _, syncEvery := range []int{8, 0} {
		name := "FilePerKey/syncfs-per-8"
		if syncEvery == 0 {
			name = "FilePerKey/no-sync" // the metadata work alone
		}
		b.Run(name, func(b *testing.B) { filePerKey(b, value, syncEvery) })
	}
	for _, batch := range []int{8, 64} {
		b.Run(fmt.Sprintf("Log/fdatasync-per-%d", batch), func(b *testing.B) {
			fd, err := unix.Open(filepath.Join(b.TempDir(), "log"), unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(fd)
			var mu sync.Mutex
			pending := 0
			b.SetParallelism(4)
			cpu := startCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := unix.Write(fd, value); err != nil {
						b.Error(err)
						return
					}
					var err error
					mu.Lock()
					if pending++; pending >= batch {
						pending = 0
						err = unix.Fdatasync(fd)
					}
					mu.Unlock()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			if err := unix.Fdatasync(fd); err != nil {
				b.Fatal(err)
			}
			cpu.report()
		})
	}
}

func filePerKey(b *testing.B, value []byte, syncEvery int) {
	dir := b.TempDir()
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(root)
	var next atomic.Int64
	b.SetParallelism(4)
	cpu := startCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			n := next.Add(1)
			tmp := filepath.Join(dir, fmt.Sprintf(".tmp-%d", n))
			fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
			if err != nil {
				b.Error(err)
				return
			}
			_, werr := unix.Write(fd, value)
			cerr := unix.Close(fd)
			if err := firstErr(werr, cerr, unix.Rename(tmp, filepath.Join(dir, fmt.Sprintf("k%08d.json", n)))); err != nil {
				b.Error(err)
				return
			}
			if syncEvery > 0 && i%syncEvery == syncEvery-1 {
				if err := unix.Syncfs(root); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	cpu.report()
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
