package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/protocol"
)

// BenchmarkReadPersisted reads a journal whose content is all persisted
// (to a file store) through the broker, and directly from the store, and
// reports, besides MB/s, the CPU that the broker spent per GB read
// (broker-cpu-s/GB) and the CPU of the reading process per GB
// (client-cpu-s/GB: the test process, which holds the client and an idle
// etcd). The broker is a process of its own (`quire broker serve`, this
// test binary), so its CPU is its own: from /proc/PID/stat. The journal
// is QUIRE_BENCH_READ_MIB MiB (default 256) of generated text, in
// fragments of 32 MiB, for each codec.
//
//	go test ./cmd/quire -run '^$' -bench BenchmarkReadPersisted -benchtime 3x
func BenchmarkReadPersisted(b *testing.B) {
	size := int64(256 << 20)
	if v := os.Getenv("QUIRE_BENCH_READ_MIB"); v != "" {
		mib, err := strconv.ParseInt(v, 10, 64)
		if err != nil || mib <= 0 {
			b.Fatalf("QUIRE_BENCH_READ_MIB=%q: want a positive number of MiB", v)
		}
		size = mib << 20
	}
	brokerAddr, pid := startBrokerProcess(b)
	cl, err := client.New(context.Background(), client.Config{Broker: brokerAddr})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	through, err := client.New(context.Background(), client.Config{Broker: brokerAddr, ReadThroughBrokers: true})
	if err != nil {
		b.Fatal(err)
	}
	defer through.Close()

	for _, codec := range []protocol.Codec{protocol.Codec_CODEC_ZSTD, protocol.Codec_CODEC_NONE} {
		name := strings.ToLower(strings.TrimPrefix(codec.String(), "CODEC_"))
		b.Run(name, func(b *testing.B) {
			journal := "bench/read-" + name
			fillPersisted(b, cl, journal, codec, size)
			for _, mode := range []struct {
				name string
				cl   *client.Client
			}{{"brokers", through}, {"direct", cl}} {
				b.Run(mode.name, func(b *testing.B) {
					b.SetBytes(size)
					direct0 := counterValue(b, "quire_client_direct_read_bytes_total")
					broker0, client0 := processCPU(b, pid), brokertest.CPUTime()
					b.ResetTimer()
					for range b.N {
						r := mode.cl.NewReader(context.Background(), client.ReadRequest{Journal: journal, EndOffset: size})
						n, err := io.Copy(io.Discard, r)
						r.Close()
						if err != nil || n != size {
							b.Fatalf("read %d bytes of %d: %v", n, size, err)
						}
					}
					b.StopTimer()
					gb := float64(b.N) * float64(size) / 1e9
					b.ReportMetric((processCPU(b, pid)-broker0).Seconds()/gb, "broker-cpu-s/GB")
					b.ReportMetric((brokertest.CPUTime()-client0).Seconds()/gb, "client-cpu-s/GB")
					want := 0.0
					if mode.name == "direct" {
						want = float64(b.N) * float64(size)
					}
					if direct := counterValue(b, "quire_client_direct_read_bytes_total") - direct0; direct != want {
						b.Fatalf("%v bytes were read from the store directly, want %v", direct, want)
					}
				})
			}
		})
	}
}

// startBrokerProcess runs `quire broker serve` (this test binary) with a
// fresh prefix, spool directory and file store, until the benchmark
// ends, and returns its address and process id once it serves.
func startBrokerProcess(b *testing.B) (string, int) {
	b.Helper()
	etcd, root := etcdtest.Client(b)
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(b))
	dir := b.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "broker.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close() // The child has its own descriptor.
	cmd := exec.Command(os.Args[0], "broker", "serve", "--etcd", etcdtest.Shared(b).Endpoint(),
		"--prefix", root, "--zone", "z1", "--suffix", "bench", "--listen", addr,
		"--dir", filepath.Join(dir, "spools"), "--store", "file://"+filepath.Join(dir, "store")+"/",
		"--lease", "3s", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "QUIRE_TEST_RUN_MAIN=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	b.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := awaitKey(ctx, etcd, allocator.MemberKey(root, "z1", "bench")); err != nil {
		log, _ := os.ReadFile(logFile.Name())
		b.Fatalf("the broker never announced itself: %v; its log:\n%s", err, log)
	}
	return addr, cmd.Process.Pid
}

// fillPersisted creates journal, with fragments of 32 MiB in codec, and
// appends generated text to it until [0, size) is persisted.
func fillPersisted(b *testing.B, cl *client.Client, journal string, codec protocol.Codec, size int64) {
	b.Helper()
	const fragLen = 32 << 20
	brokertest.Apply(b, cl, &protocol.JournalSpec{Name: journal, Replication: 1,
		Fragment: &protocol.JournalSpec_Fragment{Length: fragLen, Codec: codec}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Text that compresses as logs do (zstd: about 3 to 1), generated
	// throughout: a repeated block would compress, and decompress, far
	// better than real content.
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("append broker client commit fragment journal offset primary read replica route spool store write")
	var chunk bytes.Buffer
	for total := int64(0); total < size+fragLen+(1<<20); total += int64(chunk.Len()) {
		chunk.Reset()
		for chunk.Len() < 4<<20 {
			fmt.Fprintf(&chunk, "%d %s %s %x %d\n", total+int64(chunk.Len()), words[rng.IntN(len(words))],
				words[rng.IntN(len(words))], rng.Uint32(), rng.IntN(100000))
		}
		if _, err := cl.Append(ctx, client.AppendRequest{Journal: journal}, bytes.NewReader(chunk.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	for {
		infos, err := cl.ListFragments(ctx, &protocol.FragmentsRequest{Journal: journal})
		var stored int64
		for _, info := range infos {
			if f := info.GetFragment(); f.GetModTime() != 0 && f.GetBegin() == stored {
				stored = f.GetEnd()
			}
		}
		if err == nil && stored >= size {
			return
		}
		if ctx.Err() != nil {
			b.Fatalf("%s is persisted up to %d (%v), want %d", journal, stored, err, size)
		}
		time.Sleep(100 * time.Millisecond) // Polling the persister.
	}
}

// processCPU is the CPU time, user and system, that process pid has used
// so far, from /proc/PID/stat (in clock ticks of 10 ms: Linux's USER_HZ).
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and
	// may hold spaces: state, ppid, … utime is the 14th field of the
	// line, stime the 15th.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		b.Fatalf("/proc/%d/stat: %q has no command name", pid, stat)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		b.Fatalf("/proc/%d/stat: %q has too few fields", pid, stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %q: %v", pid, f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
