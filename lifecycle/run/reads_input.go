package run

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/storage"
)

// input reads a run's input.json; a run submitted without input has none
// (nil, no error).
func (rd *reads) input(ctx context.Context, runID string) (json.RawMessage, error) {
	slug, _, err := rd.locate(ctx, runID)
	if err != nil {
		return nil, err
	}
	key, err := layout.RunInputKey(slug, runID)
	if err != nil {
		return nil, err
	}
	b, _, err := rd.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		// Written checked at submit; a record that no longer decodes is
		// answered as none rather than handed on as JSON it is not.
		return nil, nil
	}
	return b, nil
}
