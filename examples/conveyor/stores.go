package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/runconveyor/conveyor/internal/storeopen"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/storage"
)

// The store commands (copy, show) open stores themselves, by name (see
// storeopen.Usage), not through a Worker's API: they work on a stopped
// Worker's store.

// copyPage is how many keys copy lists before it copies them.
const copyPage = 500

// storeCommand runs copy or show: flags, the stores opened, exit codes as
// cli's.
func storeCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conveyor "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	from := fs.String("from", "", "the store to copy from: "+storeopen.Usage)
	to := fs.String("to", "", "the store to copy into (create-only: a record already there is left as it is)")
	prefix := fs.String("prefix", "", "copy only the keys under this prefix")
	store := fs.String("store", "", "the store to read: "+storeopen.Usage)
	endpoint := fs.String("s3-endpoint", "", "S3 API URL for s3:// stores (default from the environment)")
	if name == "copy" {
		fs.Usage = func() {
			fmt.Fprintln(stderr, "usage: conveyor copy -from STORE -to STORE [-prefix P] [-s3-endpoint URL]")
		}
	} else if name == "reconcile" {
		fs.Usage = func() { fmt.Fprintln(stderr, "usage: conveyor reconcile -store STORE [-s3-endpoint URL]") }
	} else {
		fs.Usage = func() { fmt.Fprintln(stderr, "usage: conveyor show -store STORE [-s3-endpoint URL] <key | prefix/>") }
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	s3 := storeopen.S3{Endpoint: *endpoint}
	var err error
	switch {
	case name == "copy" && (*from == "" || *to == "" || fs.NArg() > 0):
		err = usageError("copy needs -from and -to, and no arguments")
	case name == "copy" && *from == *to:
		err = usageError("copy -from and -to name the same store")
	case name == "copy":
		err = copyCommand(ctx, *from, *to, *prefix, s3, stdout)
	case name == "reconcile" && (*store == "" || fs.NArg() > 0):
		err = usageError("reconcile needs -store, and no arguments")
	case name == "reconcile":
		err = reconcileCommand(ctx, *store, s3, stdout)
	case *store == "" || fs.NArg() != 1:
		err = usageError("show needs -store and one key or prefix/")
	default:
		err = showCommand(ctx, *store, fs.Arg(0), s3, stdout)
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "conveyor %s: %v\n", name, err)
		fs.Usage()
		return 2
	default:
		fmt.Fprintf(stderr, "conveyor %s: %v\n", name, err)
		return 1
	}
}

func copyCommand(ctx context.Context, fromName, toName, prefix string, s3 storeopen.S3, out io.Writer) error {
	src, fromWhere, err := storeopen.Open(ctx, fromName, s3)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, toWhere, err := storeopen.Open(ctx, toName, s3)
	if err != nil {
		return err
	}
	defer dst.Close()
	n, same, err := copyStore(ctx, src, dst, prefix)
	fmt.Fprintf(out, "copied %d records from %s to %s", n, fromWhere, toWhere)
	if same > 0 {
		fmt.Fprintf(out, " (%d more were there already, the same)", same)
	}
	fmt.Fprintln(out, "; versions are each store's own: the copies have new ones")
	return err
}

// copyStore copies every record of src under prefix into dst, a page of
// keys at a time, each created only if missing: it returns how many it
// copied and how many dst held already with the same bytes (so a copy
// that stopped can run again). A record dst holds with other bytes stops
// it.
func copyStore(ctx context.Context, src, dst *storage.Store, prefix string) (copied, same int, err error) {
	after := ""
	for {
		keys := make([]string, 0, copyPage)
		for k, err := range src.ListAfter(ctx, prefix, after) {
			if err != nil {
				return copied, same, err
			}
			if keys = append(keys, k); len(keys) == copyPage {
				break
			}
		}
		for _, k := range keys {
			v, _, err := src.Get(ctx, k)
			if errors.Is(err, storage.ErrNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				return copied, same, err
			}
			_, err = dst.Put(ctx, k, v, storage.IfNotExists())
			if errors.Is(err, storage.ErrPreconditionFailed) {
				there, _, gerr := dst.Get(ctx, k)
				if gerr == nil && bytes.Equal(there, v) {
					same++
					continue
				}
				return copied, same, fmt.Errorf("%s: the destination holds another record there: %w", k, err)
			}
			if err != nil {
				return copied, same, err
			}
			copied++
		}
		if len(keys) < copyPage {
			return copied, same, nil
		}
		after = keys[len(keys)-1]
	}
}

// record is one record as show prints it under a prefix: a JSON line.
type record struct {
	Key     string          `json:"key"`
	Version string          `json:"version"`
	Value   json.RawMessage `json:"value,omitempty"`
	Bytes   []byte          `json:"bytes,omitempty"` // a value that is not JSON (base64)
}

// showCommand prints the record at key as it is stored (indented when it
// is JSON), or, for a prefix (ending in '/', or empty), each record under
// it as a JSON line with its key and version.
func showCommand(ctx context.Context, name, arg string, s3 storeopen.S3, out io.Writer) error {
	s, _, err := storeopen.Open(ctx, name, s3)
	if err != nil {
		return err
	}
	defer s.Close()
	if arg != "" && !strings.HasSuffix(arg, "/") {
		v, _, err := s.Get(ctx, arg)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if json.Indent(&buf, v, "", "  ") != nil {
			_, err = out.Write(v)
			return err
		}
		buf.WriteByte('\n')
		_, err = buf.WriteTo(out)
		return err
	}
	enc := json.NewEncoder(out)
	for k, err := range s.List(ctx, arg) {
		if err != nil {
			return err
		}
		v, ver, err := s.Get(ctx, k)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		r := record{Key: k, Version: string(ver)}
		if json.Valid(v) {
			r.Value = v
		} else {
			r.Bytes = v
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

const bucketUsage = "usage: conveyor bucket create -s3-bucket B [-s3-endpoint URL]"

// bucketCommand runs bucket create: the one way, besides the S3 server's
// own tools, to make the bucket a Worker's -s3-bucket names, with the
// same flags and environment as the Worker (credentials from
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Exit codes as cli's.
func bucketCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conveyor bucket", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, bucketUsage) }
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "conveyor bucket: want create")
		fs.Usage()
		return 2
	}
	var o storeopen.S3
	fs.StringVar(&o.Bucket, "s3-bucket", os.Getenv("CONVEYOR_S3_BUCKET"), "the bucket to create (env CONVEYOR_S3_BUCKET)")
	fs.StringVar(&o.Endpoint, "s3-endpoint", "", "S3 API URL, e.g. http://127.0.0.1:9000 for MinIO (default CONVEYOR_S3_ENDPOINTS, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.Bucket == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "conveyor bucket create: needs -s3-bucket (or CONVEYOR_S3_BUCKET), and no arguments")
		fs.Usage()
		return 2
	}
	if err := storeopen.CreateBucket(ctx, o); err != nil {
		fmt.Fprintf(stderr, "conveyor bucket create: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "bucket %s is ready: run the Worker with -s3-bucket %s\n", o.Bucket, o.Bucket)
	return 0
}

// reconcileCommand reads every job of the store and puts back in its lane
// each job in flight that no lane entry or agent lock points at
// (jobqueue.Operator.Reconcile), beside any Workers running on it.
func reconcileCommand(ctx context.Context, name string, s3 storeopen.S3, out io.Writer) error {
	s, where, err := storeopen.Open(ctx, name, s3)
	if err != nil {
		return err
	}
	defer s.Close()
	q, err := jobqueue.New(jobqueue.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	r, err := (jobqueue.Operator{Queue: q}).Reconcile(ctx)
	fmt.Fprintf(out, "%s: %d jobs read, %d rescued, %d relaned, %d buried, %d quarantined, %d skipped\n",
		where, r.Jobs, r.Rescued, r.Relaned, r.Buried, r.Quarantined, r.Skipped)
	return err
}
