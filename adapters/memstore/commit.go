package memstore

import (
	"context"
	"slices"
	"strconv"

	"github.com/runconveyor/conveyor/internal/origin"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

var _ driver.Committer = (*memDriver)(nil)

// Commit implements driver.Committer: every condition is checked under the
// lock before anything is applied, so the writes land together or not at
// all.
func (s *memDriver) Commit(ctx context.Context, writes []driver.Write) ([]driver.Version, error) {
	values := make([][]byte, len(writes))
	for i, w := range writes {
		if !w.Delete {
			values[i] = slices.Clone(w.Value)
			if values[i] == nil {
				values[i] = []byte{}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		if !w.Cond.Holds(s.data[w.Key].version) {
			return nil, &driver.OpError{Op: "commit", Key: w.Key, Kind: storage.ErrPreconditionFailed}
		}
	}
	vs := make([]driver.Version, len(writes))
	mark := origin.Of(ctx)
	for i, w := range writes {
		_, ok := s.data[w.Key]
		switch {
		case w.Delete && ok:
			delete(s.data, w.Key)
			s.order.remove(w.Key)
		case !w.Delete:
			s.seq++
			vs[i] = driver.Version("m" + strconv.FormatUint(s.seq, 10))
			if !ok {
				s.order.insert(w.Key)
			}
			s.data[w.Key] = entry{value: values[i], version: vs[i]}
		}
		if !w.Delete || ok {
			s.notify(w.Key, mark)
		}
	}
	return vs, nil
}
