package s3store_test

import (
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/storetest"
)

// BenchmarkS3Store measures the adapter; BenchmarkRawS3 does the same
// operations with the same client straight through aws-sdk-go-v2, so the
// adapter's overhead is the ratio of the two.
func BenchmarkS3Store(b *testing.B) {
	storetest.BenchmarkStore(b, func(b *testing.B) *storage.Store { return newStore(b).Store })
}

func BenchmarkRawS3(b *testing.B) {
	srv, bkt := env(b)
	client := newClient(srv, nil)
	value := bytes.Repeat([]byte("x"), benchValueSize)
	// A fresh prefix per run, since -count repeats sub-benchmarks.
	key := func(prefix, k string) *string { return aws.String(prefix + k) }

	b.Run("Get", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: key(prefix, "bench/get"), Body: bytes.NewReader(value)}); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchValueSize)
		for b.Loop() {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: &bkt, Key: key(prefix, "bench/get")})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadAll(out.Body); err != nil {
				b.Fatal(err)
			}
			out.Body.Close()
		}
	})
	b.Run("Create", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		b.SetBytes(benchValueSize)
		i := 0
		for b.Loop() {
			i++
			_, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &bkt, Key: key(prefix, "bench/create/"+strconv.Itoa(i)),
				Body: bytes.NewReader(value), IfNoneMatch: aws.String("*"),
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("CASUpdate", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		out, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: key(prefix, "bench/cas"), Body: bytes.NewReader(value)})
		if err != nil {
			b.Fatal(err)
		}
		etag := out.ETag
		// Alternate two bodies: with identical bodies the ETag would never
		// change and the raw loop would not be a real compare-and-swap chain.
		bodies := [2][]byte{value, append([]byte("y"), value[1:]...)}
		b.SetBytes(benchValueSize)
		i := 0
		for b.Loop() {
			i++
			out, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &bkt, Key: key(prefix, "bench/cas"),
				Body: bytes.NewReader(bodies[i%2]), IfMatch: etag,
			})
			if err != nil {
				b.Fatal(err)
			}
			etag = out.ETag
		}
	})
}

// BenchmarkS3VsRaw runs each operation through the adapter and through the
// raw client in alternation, one of each per iteration, and reports both
// latencies and their ratio. Pairing cancels the drift and load noise that
// separate runs against one MinIO on a shared machine suffer from.
func BenchmarkS3VsRaw(b *testing.B) {
	srv, bkt := env(b)
	client := newClient(srv, nil)
	value := bytes.Repeat([]byte("x"), benchValueSize)

	// pair times adapter and raw calls alternately and reports the result.
	pair := func(b *testing.B, adapter, raw func(i int) error) {
		var ta, tr time.Duration
		i := 0
		for b.Loop() {
			i++
			first, second, t1, t2 := adapter, raw, &ta, &tr
			if i%2 == 0 { // alternate which goes first
				first, second, t1, t2 = raw, adapter, &tr, &ta
			}
			start := time.Now()
			if err := first(i); err != nil {
				b.Fatal(err)
			}
			mid := time.Now()
			if err := second(i); err != nil {
				b.Fatal(err)
			}
			*t1 += mid.Sub(start)
			*t2 += time.Since(mid)
		}
		b.ReportMetric(float64(ta.Nanoseconds())/float64(i), "adapter-ns/op")
		b.ReportMetric(float64(tr.Nanoseconds())/float64(i), "raw-ns/op")
		b.ReportMetric(float64(ta)/float64(tr), "adapter/raw")
	}

	b.Run("Get", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		s, err := openWithClient(client, bkt, prefix)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Put(ctx, "a", value, storage.Condition{}); err != nil {
			b.Fatal(err)
		}
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: aws.String(prefix + "r"), Body: bytes.NewReader(value)}); err != nil {
			b.Fatal(err)
		}
		pair(b, func(int) error {
			_, _, err := s.Get(ctx, "a")
			return err
		}, func(int) error {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: &bkt, Key: aws.String(prefix + "r")})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			_, err = io.ReadAll(out.Body)
			return err
		})
	})
	b.Run("Create", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		s, err := openWithClient(client, bkt, prefix)
		if err != nil {
			b.Fatal(err)
		}
		pair(b, func(i int) error {
			_, err := s.Put(ctx, "a/"+strconv.Itoa(i), value, storage.IfNotExists())
			return err
		}, func(i int) error {
			_, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &bkt, Key: aws.String(prefix + "r/" + strconv.Itoa(i)),
				Body: bytes.NewReader(value), IfNoneMatch: aws.String("*"),
			})
			return err
		})
	})
	b.Run("CASUpdate", func(b *testing.B) {
		ctx, prefix := b.Context(), randomPrefix()
		s, err := openWithClient(client, bkt, prefix)
		if err != nil {
			b.Fatal(err)
		}
		v, err := s.Put(ctx, "a", value, storage.Condition{})
		if err != nil {
			b.Fatal(err)
		}
		out, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &bkt, Key: aws.String(prefix + "r"), Body: bytes.NewReader(value)})
		if err != nil {
			b.Fatal(err)
		}
		etag := out.ETag
		bodies := [2][]byte{value, append([]byte("y"), value[1:]...)}
		pair(b, func(int) error {
			v, err = s.Put(ctx, "a", value, storage.IfMatch(v))
			return err
		}, func(i int) error {
			out, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &bkt, Key: aws.String(prefix + "r"),
				Body: bytes.NewReader(bodies[i%2]), IfMatch: etag,
			})
			if err != nil {
				return err
			}
			etag = out.ETag
			return nil
		})
	})
}

// BenchmarkListAfter: the last 10 keys after 1k and 100k, one request each
// (StartAfter). The request count is flat; single-drive MinIO's time to
// serve it is not (it walks the folder on disk).
func BenchmarkListAfter(b *testing.B) {
	storetest.BenchmarkListAfter(b, func(b *testing.B) *storage.Store { return newStore(b).Store }, 1000, 100_000)
}

// benchValueSize is the value size the benchmarks write: a typical
// status.json, as storetest's benchmarks write.
const benchValueSize = 1 << 10
