// gohttp URL N KEEPALIVE: N parallel GETs of URL from one Go process (Go
// connects with its own system calls, which LD_PRELOAD never sees).
// KEEPALIVE 1 keeps connections for reuse (each GET still needs its own,
// since all run at once), 0 closes each after its answer. Prints one line
// per request, "ok" or "err: ...", then "done". Built by the tests (go
// build, cached in build/tests/); not part of `make`.
//
// gohttp spawn N CMD ARGS...: starts N copies of CMD at once and waits for
// them (a Go parent of dynamic children, e.g. curl).
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

func get(url string, keepAlive bool) []string {
	n, _ := strconv.Atoi(os.Args[2])
	client := &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: n},
	}
	lines := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := client.Get(url)
			if err != nil {
				lines[i] = "err: " + err.Error()
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lines[i] = "ok"
		}(i)
	}
	wg.Wait()
	return lines
}

func spawn() {
	n, _ := strconv.Atoi(os.Args[2])
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[3], os.Args[4:]...)
			cmd.Stdout = os.Stdout
			cmd.Stderr = os.Stderr
			cmd.Run()
		}()
	}
	wg.Wait()
	fmt.Println("done")
}

func main() {
	if len(os.Args) >= 4 && os.Args[1] == "spawn" {
		spawn()
		return
	}
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: gohttp URL N KEEPALIVE | gohttp spawn N CMD ARGS...")
		os.Exit(2)
	}
	for _, line := range get(os.Args[1], os.Args[3] == "1") {
		fmt.Println(line)
	}
	fmt.Println("done")
}
