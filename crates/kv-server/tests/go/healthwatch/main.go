// healthwatch asks a member's gRPC health service (grpc.health.v1, the
// service "" that etcd reports) for its status every millisecond, as a
// client's health checker would, and prints each status it sees change,
// one per line, until its standard input closes or it has run for the
// given time, whichever comes first.
//
//	healthwatch ENDPOINT DURATION
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: healthwatch ENDPOINT DURATION")
		os.Exit(2)
	}
	length, err := time.ParseDuration(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	conn, err := grpc.Dial(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	last := ""
	for end := time.Now().Add(length); time.Now().Before(end); time.Sleep(time.Millisecond) {
		select {
		case <-closed:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		answer, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: ""})
		cancel()
		status := "ERROR"
		if err == nil {
			status = answer.Status.String()
		}
		if status != last {
			fmt.Println(status)
			last = status
		}
	}
}
