package testenv

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerSpec says how to run a kind in a container when its binary is
// missing. Only shared servers come from containers.
type containerSpec struct {
	image string
	port  string // exposed port, "6379/tcp"
	cmd   []string
	env   map[string]string
	wait  wait.Strategy
	value func(hostPort string) string // the kind's env var value for the mapped port
}

var containerSpecs = map[*kind]containerSpec{
	redisKind: {
		image: "redis:7",
		port:  "6379/tcp",
		cmd:   []string{"redis-server", "--save", "", "--appendonly", "no", "--protected-mode", "no"},
		wait:  wait.ForLog("Ready to accept connections"),
		value: func(hp string) string { return hp },
	},
	postgresKind: {
		image: "postgres:16",
		port:  "5432/tcp",
		cmd: []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=200"},
		env: map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"},
		// The image's entrypoint starts the server twice: once to initialise.
		wait: wait.ForAll(
			wait.ForLog("database system is ready to accept connections").WithOccurrence(2),
			wait.ForListeningPort("5432/tcp"),
		),
		value: func(hp string) string { return "postgres://postgres@" + hp + "/postgres?sslmode=disable" },
	},
	etcdKind: {
		image: "quay.io/coreos/etcd:v3.5.17",
		port:  "2379/tcp",
		cmd: []string{"/usr/local/bin/etcd", "--name", "m0", "--data-dir", "/tmp/m0",
			"--listen-client-urls", "http://0.0.0.0:2379",
			"--advertise-client-urls", "http://127.0.0.1:2379",
			"--heartbeat-interval=10", "--election-timeout=100"},
		wait:  wait.ForHTTP("/health").WithPort("2379/tcp"),
		value: func(hp string) string { return hp },
	},
}

var docker struct {
	once sync.Once
	why  string
}

// dockerUnavailable returns "" when a Docker engine answers a ping, else why
// not. It asks once per process.
func dockerUnavailable() string {
	docker.once.Do(func() {
		defer func() { // testcontainers may panic without an engine
			if r := recover(); r != nil {
				docker.why = fmt.Sprint("docker: ", r)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err == nil {
			defer cli.Close()
			_, err = cli.Ping(ctx, client.PingOptions{})
		}
		if err != nil {
			docker.why = "docker: " + err.Error()
		}
	})
	return docker.why
}

// startContainer runs the kind's container and returns it as a server that
// Main terminates. testcontainers' reaper removes it if the test binary dies.
func startContainer(k *kind) (*Server, error) {
	spec := containerSpecs[k]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // includes pulling
	defer cancel()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        spec.image,
			ExposedPorts: []string{spec.port},
			Cmd:          spec.cmd,
			Env:          spec.env,
			WaitingFor:   spec.wait,
		},
		Started: true,
	})
	terminate := func(ctx context.Context) error { // also for a nil or half-made c
		return testcontainers.TerminateContainer(c, testcontainers.StopContext(ctx))
	}
	if err != nil {
		_ = terminate(context.Background())
		return nil, fmt.Errorf("container %s: %w", spec.image, err)
	}
	s, err := func() (*Server, error) {
		host, err := c.Host(ctx)
		if err != nil {
			return nil, err
		}
		port, err := c.MappedPort(ctx, spec.port)
		if err != nil {
			return nil, err
		}
		return external(k, spec.value(net.JoinHostPort(host, port.Port())), fromContainer)
	}()
	if err != nil {
		_ = terminate(context.Background())
		return nil, fmt.Errorf("container %s: %w", spec.image, err)
	}
	s.terminate = terminate
	return s, nil
}
