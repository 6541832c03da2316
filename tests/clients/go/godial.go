// godial ADDR N [parallel]: N TCP connects to ADDR from one Go process
// (Go's connects are non-blocking, made with its own system calls), one
// after the other, each closed once connected; parallel: all at once.
// Prints the outcomes on one line, in order: "ok" or the errno number.
//
// godial ADDR N pool G HOLD_MS: the N connects made by G goroutines, each
// taking the next one to make; each connection is held HOLD_MS before it
// is closed. Prints the outcomes as above, in the order of the connects.
//
// godial ADDR probe: connects every 20 ms (for at most 10 s) while the
// breaker refuses (EHOSTUNREACH, 113), then once more at once; prints the
// first outcome that was not 113 and the next one.
// Built by the tests (go build, cached in build/tests/); not part of `make`.
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func dial(addr string) string {
	return dialHolding(addr, 0)
}

func dialHolding(addr string, hold time.Duration) string {
	conn, err := net.DialTimeout("tcp", addr, 20*time.Second)
	if err == nil {
		time.Sleep(hold)
		conn.Close()
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return strconv.Itoa(int(errno))
	}
	return "err: " + err.Error()
}

func pool(out []string, addr, goroutines, holdMs string) {
	g, _ := strconv.Atoi(goroutines)
	ms, _ := strconv.Atoi(holdMs)
	var next int64 = -1
	var wg sync.WaitGroup
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := atomic.AddInt64(&next, 1); i < int64(len(out)); i = atomic.AddInt64(&next, 1) {
				out[i] = dialHolding(addr, time.Duration(ms)*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: godial ADDR N [parallel | pool G HOLD_MS] | godial ADDR probe")
		os.Exit(2)
	}
	if os.Args[2] == "probe" {
		first := dial(os.Args[1])
		for i := 0; i < 500 && first == "113"; i++ {
			time.Sleep(20 * time.Millisecond)
			first = dial(os.Args[1])
		}
		fmt.Println(first, dial(os.Args[1]))
		return
	}
	n, _ := strconv.Atoi(os.Args[2])
	out := make([]string, n)
	if len(os.Args) > 5 && os.Args[3] == "pool" {
		pool(out, os.Args[1], os.Args[4], os.Args[5])
	} else if len(os.Args) > 3 {
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func(i int) { defer wg.Done(); out[i] = dial(os.Args[1]) }(i)
		}
		wg.Wait()
	} else {
		for i := range out {
			out[i] = dial(os.Args[1])
		}
	}
	fmt.Println(strings.Join(out, " "))
}
