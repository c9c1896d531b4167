// Command fakecri serves the fake CRI runtime and image services that Kubernetes
// ships for its own tests (k8s.io/cri-client/pkg/fake) on a unix socket, so a real
// kubelet can run pods without a container engine.  Nothing is executed: sandboxes
// and containers are entries in memory that go from created to running on request.
//
// Every CreateContainer call is appended as one JSON line to --record: the pod and
// container names, the CDI device ids the kubelet asked for (CDIDevices), the
// container's annotations, environment, mounts and devices.  The e2e tests read
// that file to see what a real runtime would have been told to inject.
//
// A container runs until the kubelet stops it, unless its environment has
// FAKECRI_EXIT_AFTER (a Go duration, "2s"): it then exits that long after it
// started, with FAKECRI_EXIT_CODE (default 0), so Jobs' pods complete.
//
//	fakecri --listen /tmp/x/cri.sock --record /tmp/x/cri-records.jsonl
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// record is one CreateContainer call as written to the --record file.
type record struct {
	Event        string            `json:"event"`
	Time         string            `json:"time"`
	PodName      string            `json:"pod_name"`
	PodNamespace string            `json:"pod_namespace"`
	PodUID       string            `json:"pod_uid"`
	SandboxID    string            `json:"sandbox_id"`
	Container    string            `json:"container"`
	Attempt      uint32            `json:"attempt"`
	ContainerID  string            `json:"container_id"`
	CDIDevices   []string          `json:"cdi_devices"`
	Annotations  map[string]string `json:"annotations"`
	Envs         map[string]string `json:"envs"`
	Mounts       []mount           `json:"mounts"`
	Devices      []device          `json:"devices"`
	Error        string            `json:"error,omitempty"`
}

type mount struct {
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
	Readonly      bool   `json:"readonly"`
}

type device struct {
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
	Permissions   string `json:"permissions"`
}

// recordingRuntime is the upstream fake with CreateContainer wrapped to record it.
type recordingRuntime struct {
	*fake.RemoteRuntime
	mu     sync.Mutex
	out    *os.File
	logDir string          // container logs when the kubelet names no log path
	exits  map[string]exit // containers that exit by themselves, by id (under mu)
}

// exit is when (after its start) and how a container exits by itself.
type exit struct {
	after time.Duration
	code  int32
}

// exitOf reads FAKECRI_EXIT_AFTER and FAKECRI_EXIT_CODE from a container's environment.
func exitOf(envs map[string]string) (exit, bool) {
	after, err := time.ParseDuration(envs["FAKECRI_EXIT_AFTER"])
	if envs["FAKECRI_EXIT_AFTER"] == "" || err != nil {
		return exit{}, false
	}
	var code int32
	if c := envs["FAKECRI_EXIT_CODE"]; c != "" {
		if _, err := fmt.Sscanf(c, "%d", &code); err != nil {
			log.Printf("FAKECRI_EXIT_CODE %q: %v", c, err)
		}
	}
	return exit{after: after, code: code}, true
}

// StartContainer starts the container as the upstream fake does and, for one that
// exits by itself, marks it exited (with its code) once its time is up; the
// kubelet's PLEG sees the change on its next relist.
func (r *recordingRuntime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return resp, err
	}
	id := req.GetContainerId()
	r.mu.Lock()
	e, ok := r.exits[id]
	delete(r.exits, id)
	r.mu.Unlock()
	if ok {
		time.AfterFunc(e.after, func() {
			rs := r.RuntimeService
			rs.Lock()
			defer rs.Unlock()
			if c, found := rs.Containers[id]; found && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				c.State = runtimeapi.ContainerState_CONTAINER_EXITED
				c.FinishedAt = time.Now().UnixNano()
				c.ExitCode = e.code
				c.Reason = "Completed"
				if e.code != 0 {
					c.Reason = "Error"
				}
			}
		})
	}
	return resp, err
}

func (r *recordingRuntime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	cfg, sandbox := req.GetConfig(), req.GetSandboxConfig()
	rec := record{
		Event:        "CreateContainer",
		Time:         time.Now().UTC().Format(time.RFC3339Nano),
		PodName:      sandbox.GetMetadata().GetName(),
		PodNamespace: sandbox.GetMetadata().GetNamespace(),
		PodUID:       sandbox.GetMetadata().GetUid(),
		SandboxID:    req.GetPodSandboxId(),
		Container:    cfg.GetMetadata().GetName(),
		Attempt:      cfg.GetMetadata().GetAttempt(),
		ContainerID:  resp.GetContainerId(),
		CDIDevices:   []string{},
		Annotations:  cfg.GetAnnotations(),
		Envs:         map[string]string{},
		Mounts:       []mount{},
		Devices:      []device{},
	}
	if err != nil {
		rec.Error = err.Error()
	} else {
		r.setLogPath(rec.ContainerID, sandbox.GetLogDirectory(), cfg.GetLogPath())
	}
	for _, d := range cfg.GetCDIDevices() {
		rec.CDIDevices = append(rec.CDIDevices, d.GetName())
	}
	for _, kv := range cfg.GetEnvs() {
		rec.Envs[kv.GetKey()] = string(kv.GetValue())
	}
	for _, m := range cfg.GetMounts() {
		rec.Mounts = append(rec.Mounts, mount{m.GetHostPath(), m.GetContainerPath(), m.GetReadonly()})
	}
	for _, d := range cfg.GetDevices() {
		rec.Devices = append(rec.Devices, device{d.GetHostPath(), d.GetContainerPath(), d.GetPermissions()})
	}
	if e, ok := exitOf(rec.Envs); ok && err == nil {
		r.mu.Lock()
		r.exits[rec.ContainerID] = e
		r.mu.Unlock()
	}
	r.write(rec)
	return resp, err
}

// setLogPath gives the container the log file a real runtime would write (and
// creates it, empty).  The upstream fake leaves ContainerStatus.LogPath empty,
// and the kubelet then cleans a removed container's logs with Glob(LogPath+"*"):
// "*", every file in the kubelet's working directory.
func (r *recordingRuntime) setLogPath(containerID, dir, rel string) {
	path := filepath.Join(r.logDir, containerID+".log")
	if dir != "" && rel != "" {
		path = filepath.Join(dir, rel)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o640); err == nil {
			_ = f.Close()
		}
	}
	rs := r.RuntimeService
	rs.Lock()
	defer rs.Unlock()
	if c, ok := rs.Containers[containerID]; ok {
		c.LogPath = path
	}
}

func (r *recordingRuntime) write(rec record) {
	line, err := json.Marshal(rec)
	if err != nil {
		log.Printf("encode record: %v", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.out.Write(append(line, '\n')); err != nil {
		log.Printf("write record: %v", err)
	}
}

// trimCallLogs empties the fakes' unbounded lists of calls now and then; a
// kubelet polls the runtime several times a second.
func (r *recordingRuntime) trimCallLogs(every time.Duration) {
	for range time.Tick(every) {
		rs, is := r.RuntimeService, r.ImageService
		rs.Lock()
		rs.Called = rs.Called[:0]
		rs.Unlock()
		is.Lock()
		is.Called = is.Called[:0]
		is.Unlock()
	}
}

func main() {
	listen := flag.String("listen", "", "unix socket path to serve the CRI on (required)")
	recordPath := flag.String("record", "", "JSON-lines file to append CreateContainer records to (required)")
	fsRoot := flag.String("fs-root", "", "directory reported as the image and container filesystem (default: the socket's dir)")
	flag.Parse()
	if *listen == "" || *recordPath == "" {
		flag.Usage()
		os.Exit(2)
	}
	if *fsRoot == "" {
		*fsRoot = filepath.Dir(*listen)
	}
	if err := run(*listen, *recordPath, *fsRoot); err != nil {
		log.Fatalf("fakecri: %v", err)
	}
}

func run(listen, recordPath, fsRoot string) error {
	out, err := os.OpenFile(recordPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()

	upstream := fake.NewFakeRemoteRuntime() // its own gRPC server stays unused
	rt := &recordingRuntime{RemoteRuntime: upstream, out: out, logDir: filepath.Join(fsRoot, "container-logs"), exits: map[string]exit{}}
	rt.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	rt.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	usage := []*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: fsRoot},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 0},
		InodesUsed: &runtimeapi.UInt64Value{Value: 0},
	}}
	rt.ImageService.SetFakeFilesystemUsage(usage)
	rt.ImageService.SetFakeImageSize(1 << 20) // the kubelet refuses images of size 0
	rt.ImageService.SetFakeContainerFilesystemUsage(usage)
	go rt.trimCallLogs(time.Minute)

	if err := os.Remove(listen); err != nil && !os.IsNotExist(err) {
		return err
	}
	lis, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, rt)
	runtimeapi.RegisterImageServiceServer(server, rt)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("fakecri serving on %s, recording to %s", listen, recordPath)
	err = server.Serve(lis)
	_ = os.Remove(listen)
	return err
}
