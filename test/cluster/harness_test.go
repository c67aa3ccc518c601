//go:build cluster

package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/internal/testdaemon"
)

// Every name the suite gives a resource carries the id digit (see doc.go).
var (
	id       = idDigit()
	hubName  = "berthch" + id
	hubNet   = "10.24" + id + ".0"
	hubIP    = hubNet + ".254"
	s3Addr   = hubIP + ":" + strconv.Itoa(7490+int(id[0]-'0'))
	s3Dir    = "/var/tmp/berth-cl" + id + "-s3"
	s3Bucket = "berth-cl" + id
	// tag is in every path the suite's processes and mounts carry, so
	// the sweep finds what a killed run left behind.
	tag       = "berth-cl" + id + "-"
	tokenFile = "/var/tmp/berth-cl" + id + "-token"
	keyFile   = "/var/tmp/berth-cl" + id + "-api-key"
)

const (
	nodes     = 3
	s3Access  = "berthclusteraccess"
	s3Secret  = "berthclustersecret0123456789"
	heartbeat = time.Second
	stale     = 5 * time.Second
)

func idDigit() string {
	v := os.Getenv("BERTH_IT_ID")
	if len(v) == 1 && v[0] >= '0' && v[0] <= '9' {
		return v
	}
	return "0"
}

// clusterNode is one berth serve of the cluster and where it lives.
type clusterNode struct {
	i      int
	name   string // --node-name: n1..n3
	addr   string // its address on the hub, in its namespace
	netns  string
	veth   string // the hub's end of its veth pair
	data   string
	run    string
	bridge string // its sandbox bridge (in its namespace)
	subnet string
	userns uint32
	log    string

	d *testdaemon.Daemon
	c *client.Client
}

var (
	binDir  string
	apiKey  string
	dsn     string
	pg      *pgtest.Server
	s3Cmd   *exec.Cmd
	cluster [nodes + 1]*clusterNode // 1-based, as the nodes are named
	// alone is a berth serve outside the cluster (SQLite, no S3) in a
	// namespace of its own beside the nodes': TestBenchCluster's
	// single-host baseline. Its network and data dir exist for the whole
	// run; the daemon runs only during that test (startAlone).
	alone *clusterNode
)

// hosts is every host the suite sets up: the nodes, then alone.
func hosts() []*clusterNode { return append(append([]*clusterNode(nil), cluster[1:]...), alone) }

func newNode(i int) *clusterNode {
	s := strconv.Itoa(i)
	return &clusterNode{
		i: i, name: "n" + s, addr: hubNet + "." + s,
		netns: "berthc" + id + s, veth: "berthc" + id + "v" + s,
		data: "/var/tmp/" + tag + "n" + s, run: "/run/" + tag + "n" + s,
		bridge: "berthc" + id + "n" + s, subnet: "10.25" + s + ".0.0/16",
		// Disjoint from the other suites (1<<29, 1<<30, 3<<29) and from
		// the other ids and nodes: 64 sandboxes' ranges each.
		// Below 2^31 (the daemon's bound), apart from the integration
		// (1<<29), adversarial (1<<30) and compat (3<<29) suites' bases.
		userns: 7<<28 + uint32(id[0]-'0')<<24 + uint32(i-1)<<22,
		log:    filepath.Join(os.TempDir(), tag+"n"+s+".log"),
	}
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("cluster tests need root; skipping")
		os.Exit(0)
	}
	binDir = os.Getenv("BERTH_BIN")
	if binDir == "" {
		binDir, _ = filepath.Abs("../../bin")
	}
	if err := testdaemon.CheckTestBuild(binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := 1; i <= nodes; i++ {
		cluster[i] = newNode(i)
	}
	alone = newNode(nodes + 1)
	alone.name = "single"
	sweep(func(format string, args ...any) { fmt.Printf("sweep: "+format+"\n", args...) })
	t0 := time.Now()
	err := setUp()
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster set-up:", err)
	} else {
		fmt.Printf("cluster of %d nodes up in %s\n", nodes, time.Since(t0).Round(time.Millisecond))
		code = m.Run()
	}
	t1 := time.Now()
	tearDown()
	if left := waitGone(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "teardown left %d things behind:\n  %s\n", len(left), strings.Join(left, "\n  "))
		sweep(func(format string, args ...any) { fmt.Printf("sweep: "+format+"\n", args...) })
		code = 1
	} else {
		fmt.Printf("teardown clean in %s\n", time.Since(t1).Round(time.Millisecond))
	}
	os.Exit(code)
}

// sh runs one command and returns its error with its output.
func sh(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// setUp builds the network, starts PostgreSQL, versitygw and the nodes.
func setUp() error {
	if err := setUpNetwork(); err != nil {
		return err
	}
	var err error
	pg, err = pgtest.Launch(pgtest.Options{Host: hubIP, Clients: []string{hubNet + ".0/24"}})
	if err != nil {
		return fmt.Errorf("PostgreSQL on %s: %w", hubIP, err)
	}
	if dsn, err = pg.CreateDB(context.Background(), "berth_cluster"); err != nil {
		return err
	}
	if err := startS3(); err != nil {
		return err
	}
	if err := os.WriteFile(tokenFile, []byte(randHex(32)+"\n"), 0o600); err != nil {
		return err
	}
	// One user key for the whole cluster: a user's client talks to any node.
	apiKey = "e2b_" + randHex(20)
	if err := os.WriteFile(keyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		return err
	}
	seed, err := seedDir()
	if err != nil {
		return err
	}
	errs := make(chan error, nodes+1)
	for _, n := range hosts() {
		go func() { errs <- prepareData(n, seed) }()
	}
	for range nodes + 1 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	// Started together, as a cluster comes up: each migrates (once, under
	// the store's advisory lock) and registers.
	for _, n := range cluster[1:] {
		go func() { errs <- n.start(nil) }()
	}
	for range nodes {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	// Every node sees every other alive before a test runs.
	for _, n := range cluster[1:] {
		if err := waitFor(4*stale, func() error { return allAlive(n) }); err != nil {
			return fmt.Errorf("membership through %s: %w", n.name, err)
		}
	}
	if seed == "" {
		// No image to seed from: node 1 builds the base (and, on S3,
		// publishes it; the others fetch it by digest on first use).
		return testdaemon.EnsureBase(cluster[1].c, func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
	}
	return nil
}

func setUpNetwork() error {
	cmds := [][]string{
		{"ip", "link", "add", hubName, "type", "bridge"},
		{"ip", "addr", "add", hubIP + "/24", "dev", hubName},
		{"ip", "link", "set", hubName, "up"},
	}
	for _, n := range hosts() {
		// No default route: the nodes reach each other and the hub on
		// the /24 and nothing beyond it.
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.netns},
			[]string{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
			[]string{"ip", "link", "set", n.veth, "master", hubName, "up"},
			[]string{"ip", "-n", n.netns, "addr", "add", n.addr + "/24", "dev", "eth0"},
			[]string{"ip", "-n", n.netns, "link", "set", "eth0", "up"},
			[]string{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		)
	}
	for _, c := range cmds {
		if err := sh(c...); err != nil {
			return err
		}
	}
	return nil
}

func startS3() error {
	bin := filepath.Join(binDir, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no versitygw in %s: scripts/s3-server.sh start builds it (the pinned version): %w", binDir, err)
	}
	os.RemoveAll(s3Dir)
	if err := os.MkdirAll(filepath.Join(s3Dir, "data"), 0o700); err != nil {
		return err
	}
	return launchS3(true)
}

// launchS3 starts versitygw on s3Dir's data and waits until it answers:
// until it made the bucket (fresh), or sees the one it has.
func launchS3(fresh bool) error {
	bin := filepath.Join(binDir, "versitygw")
	logf, err := os.OpenFile(filepath.Join(s3Dir, "versitygw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	s3Cmd = exec.Command(bin, "--access", s3Access, "--secret", s3Secret, "--port", s3Addr, "--quiet", "posix", filepath.Join(s3Dir, "data"))
	s3Cmd.Stdout, s3Cmd.Stderr = logf, logf
	s3Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s3Cmd.Start(); err != nil {
		return err
	}
	mc, err := minio.New(s3Addr, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), Region: "us-east-1"})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if fresh {
			err = mc.MakeBucket(ctx, s3Bucket, minio.MakeBucketOptions{})
		} else if ok, e := mc.BucketExists(ctx, s3Bucket); e != nil || !ok {
			err = fmt.Errorf("bucket %s exists: %v (%v)", s3Bucket, ok, e)
		} else {
			err = nil
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on %s: create bucket %s: %w (log %s)", s3Addr, s3Bucket, err, logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopS3 stops versitygw (SIGTERM, SIGKILL after 10 s) and waits for it.
func stopS3() {
	if s3Cmd == nil || s3Cmd.Process == nil {
		return
	}
	_ = s3Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s3Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s3Cmd.Process.Kill()
		<-done
	}
	s3Cmd = nil
}

// seedDir finds a data dir whose image store holds the base image, so the
// nodes start with it (hard links: no copy, no build): $BERTH_CL_SEED, the
// integration suite's data dir, the default data dir; "" when none has one.
func seedDir() (string, error) {
	var dirs []string
	if v := os.Getenv("BERTH_CL_SEED"); v != "" {
		dirs = append(dirs, v)
	}
	dirs = append(dirs, "/var/tmp/berth-it", "/var/lib/berth")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "images", "index.json"))
		if err == nil && strings.Contains(string(b), `"debian-trixie"`) {
			fmt.Printf("seeding the nodes' images from %s/images\n", d)
			return d, nil
		}
	}
	fmt.Println("no data dir with a base image to seed from; node 1 builds one")
	return "", nil
}

// prepareData gives n a fresh data dir (a previous run's is removed: the
// state store is new) with, from seed, the images.
func prepareData(n *clusterNode, seed string) error {
	if m := mountsUnder(n.data); len(m) > 0 {
		return fmt.Errorf("%s still has mounts (%s); not removing it", n.data, strings.Join(m, ", "))
	}
	if err := os.RemoveAll(n.data); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(n.data, "images"), 0o700); err != nil {
		return err
	}
	if seed == "" {
		return nil
	}
	src := filepath.Join(seed, "images")
	for _, sub := range []string{"blobs", "l"} {
		if err := sh("cp", "-al", filepath.Join(src, sub), filepath.Join(n.data, "images", sub)); err != nil {
			return err
		}
	}
	return sh("cp", filepath.Join(src, "index.json"), filepath.Join(n.data, "images", "index.json"))
}

// start runs n's berth serve (again) with extra environment (a weaken
// switch, failpoints) and extra serve flags.
func (n *clusterNode) start(env []string, args ...string) error {
	full := append(os.Environ(),
		"BERTH_CLUSTER_DSN="+dsn, // not on the command line, where every local user can read it
		"BERTH_S3_ACCESS_KEY="+s3Access, "BERTH_S3_SECRET_KEY="+s3Secret,
		"BERTH_URL=", "BERTH_API_KEY=")
	full = append(full, env...)
	d, err := testdaemon.Start(testdaemon.Options{
		Bin: binDir, Data: n.data, RunDir: n.run, Bridge: n.bridge, Subnet: n.subnet, UserNSBase: n.userns,
		Netns: n.netns, Listen: n.addr + ":7070", PreviewListen: n.addr + ":7080",
		Env: full, Log: n.log,
		Args: append([]string{
			"--node-name", n.name,
			"--node-listen", n.addr + ":7071", "--node-insecure",
			"--cluster-token-file", tokenFile, "--api-key-file", keyFile,
			"--s3-endpoint", "http://" + s3Addr, "--s3-bucket", s3Bucket,
			"--node-heartbeat", heartbeat.String(), "--node-stale", stale.String(),
			"--alarm-tick", "200ms",
		}, args...),
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	n.d, n.c = d, d.Client
	return nil
}

// startAlone runs the single-host baseline's berth serve (not in the
// cluster: SQLite, local blobs; the cluster's API key) until t ends.
func startAlone(t *testing.T) *clusterNode {
	t.Helper()
	env := append(os.Environ(), "BERTH_URL=", "BERTH_API_KEY=", "BERTH_CLUSTER_DSN=")
	d, err := testdaemon.Start(testdaemon.Options{
		Bin: binDir, Data: alone.data, RunDir: alone.run, Bridge: alone.bridge, Subnet: alone.subnet, UserNSBase: alone.userns,
		Netns: alone.netns, Listen: alone.addr + ":7070", PreviewListen: alone.addr + ":7080",
		Env: env, Log: alone.log,
		Args: []string{"--api-key-file", keyFile, "--alarm-tick", "200ms"},
	})
	if err != nil {
		t.Fatalf("the single host: %v", err)
	}
	alone.d, alone.c = d, d.Client
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if list, err := alone.c.List(ctx, "", nil); err == nil {
			for _, sb := range list {
				_ = alone.c.Destroy(ctx, sb.Name)
			}
		}
		d.Stop()
	})
	return alone
}

// alive reports whether n's daemon runs.
func (n *clusterNode) alive() bool {
	if n.d == nil {
		return false
	}
	select {
	case <-n.d.Exited():
		return false
	default:
		return true
	}
}

// signal sends sig to n's daemon (nsenter execs berth, so the pid is
// berth's own).
func (n *clusterNode) signal(sig syscall.Signal) error { return n.d.Process.Signal(sig) }

// tearDown destroys every sandbox, stops the nodes, versitygw and
// PostgreSQL, and removes the network.
func tearDown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range cluster[1:] {
		if n.alive() {
			_ = n.signal(syscall.SIGCONT) // a test that stopped it and failed
		}
	}
	destroyAll(ctx)
	for _, n := range hosts() {
		if n.alive() {
			n.d.Stop()
		}
	}
	// What a node could not destroy (it was killed, its store was cut
	// off) is the test's to remove: containers, then mounts.
	for _, n := range hosts() {
		removeContainers(n, func(format string, args ...any) { fmt.Printf("teardown: "+format+"\n", args...) })
	}
	stopS3()
	os.RemoveAll(s3Dir)
	if pg != nil {
		if err := pg.Close(); err != nil {
			fmt.Println("teardown: PostgreSQL:", err)
		}
	}
	var wg sync.WaitGroup
	for _, n := range hosts() {
		unmountUnder(n.run, nil)
		unmountUnder(n.data, nil)
		removeCgroups(n, nil)
		_ = sh("ip", "netns", "del", n.netns)
		// The dirs go too (the images in data are hard links to the
		// seed's), unless something is still mounted there: leftovers
		// reports that.
		for _, dir := range []string{n.run, n.data} {
			if len(mountsUnder(dir)) == 0 {
				wg.Go(func() { os.RemoveAll(dir) })
			}
		}
	}
	wg.Wait()
	_ = sh("ip", "link", "del", hubName)
	os.Remove(tokenFile)
	os.Remove(keyFile)
}

// destroyAll destroys every sandbox the cluster lists, each through the
// node that owns it when that node is up, else through any live node.
func destroyAll(ctx context.Context) {
	var lister *clusterNode
	for _, n := range cluster[1:] {
		if n.alive() {
			lister = n
			break
		}
	}
	if lister == nil {
		return
	}
	list, err := lister.c.List(ctx, "", nil)
	if err != nil {
		fmt.Println("teardown: list sandboxes:", err)
		return
	}
	for _, sb := range list {
		via := lister
		if rec, err := readRecord(ctx, sb.Name); err == nil {
			if o := byName(rec.Owner); o != nil && o.alive() {
				via = o
			}
		}
		if err := via.c.Destroy(ctx, sb.Name); err != nil {
			fmt.Printf("teardown: destroy %s via %s: %v\n", sb.Name, via.name, err)
		}
	}
}

// containers lists the runc containers in n's runtime root.
func containers(n *clusterNode) ([]string, error) {
	root := filepath.Join(n.run, "runc")
	if _, err := os.Stat(root); err != nil {
		return nil, nil
	}
	out, err := exec.Command(filepath.Join(binDir, "runc"), "--root", root, "list", "-q").Output()
	if err != nil {
		return nil, fmt.Errorf("runc --root %s list: %w", root, err)
	}
	return strings.Fields(string(out)), nil
}

func removeContainers(n *clusterNode, logf func(string, ...any)) {
	ids, _ := containers(n)
	for _, c := range ids {
		if logf != nil {
			logf("removing container %s of %s", c, n.name)
		}
		_ = sh(filepath.Join(binDir, "runc"), "--root", filepath.Join(n.run, "runc"), "delete", "-f", c)
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dir string, logf func(string, ...any)) {
	for _, mp := range mountsUnder(dir) {
		if logf != nil {
			logf("unmounting %s", mp)
		}
		_ = syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}

// cgroupDirs lists the cgroup directories named for n's run dir (its
// cgroup parent, in every hierarchy).
func cgroupDirs(n *clusterNode) []string {
	base := filepath.Base(n.run)
	var out []string
	for _, pat := range []string{"/sys/fs/cgroup/" + base + "*", "/sys/fs/cgroup/*/" + base + "*"} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// removeCgroups removes n's cgroup directories bottom-up (only empty ones
// can go: a live process keeps its cgroup, and leftovers reports it).
func removeCgroups(n *clusterNode, logf func(string, ...any)) {
	for _, top := range cgroupDirs(n) {
		var dirs []string
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err == nil && logf != nil && i == 0 {
				logf("removed cgroup %s", dirs[i])
			}
		}
	}
}

// ourProcesses lists the pids (besides this one) whose command line names
// one of the suite's paths: the nodes, versitygw, anything they left.
func ourProcesses() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if strings.Contains(cmd, tag) {
			out[pid] = cmd
		}
	}
	return out
}

// leftovers lists what the suite created and is still there.
func leftovers() []string {
	var left []string
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "berthc"+id) {
				left = append(left, "netns "+f[0])
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, "berthc"+id) {
				left = append(left, "link "+i.Name)
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "berthc"+id) {
				left = append(left, "nftables "+strings.TrimSpace(l))
			}
		}
	}
	for _, n := range hosts() {
		for _, dir := range []string{n.run, n.data} {
			for _, m := range mountsUnder(dir) {
				left = append(left, "mount "+m)
			}
		}
		for _, cg := range cgroupDirs(n) {
			left = append(left, "cgroup "+cg)
		}
		if ids, _ := containers(n); len(ids) > 0 {
			left = append(left, fmt.Sprintf("containers of %s: %v", n.name, ids))
		}
	}
	for pid, cmd := range ourProcesses() {
		left = append(left, fmt.Sprintf("process %d: %s", pid, cmd))
	}
	if pg != nil && pg.Pid() != 0 {
		left = append(left, fmt.Sprintf("postgres %d", pg.Pid()))
	}
	sort.Strings(left)
	return left
}

// sweep removes what an earlier run of this suite (same id) left behind
// when it was killed: processes, containers, mounts, cgroups, namespaces
// and links. Everything it touches carries the suite's names.
func sweep(logf func(string, ...any)) {
	for pid, cmd := range ourProcesses() {
		logf("killing leftover process %d: %s", pid, cmd)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	for _, n := range hosts() {
		removeContainers(n, logf)
		unmountUnder(n.run, logf)
		unmountUnder(n.data, logf)
		removeCgroups(n, logf)
		if _, err := os.Stat("/run/netns/" + n.netns); err == nil {
			logf("removing netns %s", n.netns)
			_ = sh("ip", "netns", "del", n.netns)
		}
	}
	if _, err := net.InterfaceByName(hubName); err == nil {
		logf("removing bridge %s", hubName)
		_ = sh("ip", "link", "del", hubName)
	}
}

// allAlive checks that via lists every node of the cluster as alive.
func allAlive(via *clusterNode) error {
	list, err := via.c.ListNodes(context.Background())
	if err != nil {
		return err
	}
	alive := 0
	for _, n := range list.Nodes {
		if n.Health == api.NodeAlive && byName(n.Name) != nil {
			alive++
		}
	}
	if alive != nodes {
		return fmt.Errorf("%d of %d nodes alive: %+v", alive, nodes, list.Nodes)
	}
	return nil
}

// waitGone waits up to 10 s for what the suite removed to be gone (a
// network namespace's links go when the kernel frees it, which it does
// after the last reference closes, a moment after ip netns del), and
// returns what is left.
func waitGone() []string {
	var left []string
	for range 100 {
		if left = leftovers(); len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return left
}

// --- helpers for the tests ---

// record is a sandbox record as PostgreSQL holds it: the suite's own view,
// past every node.
type record struct {
	Version    int64
	State      string
	Owner      string
	OwnerEpoch int64
}

// readRecord reads sandbox name's record from the state store directly.
func readRecord(ctx context.Context, name string) (record, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return record{}, err
	}
	defer c.Close(context.Background())
	var r record
	err = c.QueryRow(ctx, `SELECT version, state, COALESCE(doc->>'Owner', ''), COALESCE((doc->>'OwnerEpoch')::bigint, 0)
		FROM sandboxes WHERE name = $1`, name).Scan(&r.Version, &r.State, &r.Owner, &r.OwnerEpoch)
	return r, err
}

// node returns cluster node i (1-based).
func node(i int) *clusterNode { return cluster[i] }

// byName returns the node named name, or nil.
func byName(name string) *clusterNode {
	for _, n := range cluster[1:] {
		if n.name == name {
			return n
		}
	}
	return nil
}

// create makes a sandbox through via and destroys it when t ends (through
// its owner when that node is up, else through any live node).
func create(t *testing.T, via *clusterNode, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := via.c.Create(ctx, req)
	if err != nil {
		t.Fatalf("create %s through %s: %v", req.Name, via.name, err)
	}
	destroyOnCleanup(t, via, req.Name)
	return sb
}

// destroyOnCleanup destroys sandbox name when t ends, through its owner
// when that node is up, else through any live node (via: the node that
// created it, for a record no node has claimed).
func destroyOnCleanup(t *testing.T, via *clusterNode, name string) {
	req := api.CreateSandboxRequest{Name: name}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		by := liveNode()
		if rec, err := readRecord(ctx, req.Name); err == nil {
			owner := rec.Owner
			if owner == "" { // a record no node has claimed: its creator's
				owner = via.name
			}
			if o := byName(owner); o != nil && o.alive() {
				by = o
			}
		} else if errors.Is(err, pgx.ErrNoRows) {
			return // a test destroyed it
		} else {
			t.Logf("read the record of %s: %v", req.Name, err)
		}
		if err := by.c.Destroy(ctx, req.Name); err != nil {
			t.Logf("destroy %s through %s: %v", req.Name, by.name, err)
		}
	})
}

// createPinned creates a sandbox on node n itself, past placement: the
// test acts as the entry member that placed it there and sends the create
// to n's node listener as a forwarded request (the cluster credential, the
// hop mark), which n serves locally. It is destroyed when t ends.
func createPinned(t *testing.T, n *clusterNode, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest(http.MethodPost, "http://"+n.addr+":7071"+forward.Prefix+"/"+string(forward.API)+"/v1/sandboxes", bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	hr.Header.Set(forward.HeaderHop, "1")
	hr.Header.Set(forward.HeaderKey, "1")
	res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(hr)
	if err != nil {
		t.Fatalf("create %s pinned on %s: %v", req.Name, n.name, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		t.Fatalf("create %s pinned on %s: %s: %s", req.Name, n.name, res.Status, b)
	}
	destroyOnCleanup(t, n, req.Name)
	var sb api.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatalf("create %s pinned on %s: %v: %s", req.Name, n.name, err, b)
	}
	if sb.Node != n.name {
		t.Fatalf("create %s pinned on %s: it runs on %q", req.Name, n.name, sb.Node)
	}
	return sb
}

// liveNode returns a node whose daemon runs (node 1 first).
func liveNode() *clusterNode {
	for _, n := range cluster[1:] {
		if n.alive() {
			return n
		}
	}
	return cluster[1]
}

// execVia runs a shell command in sandbox name through node via.
func execVia(t *testing.T, via *clusterNode, name, command string) api.ExecResult {
	t.Helper()
	res, err := via.c.Exec(context.Background(), name, api.ExecRequest{Command: command, TimeoutMs: 60000})
	if err != nil {
		t.Fatalf("exec %q in %s through %s: %v", command, name, via.name, err)
	}
	return res
}

var errTimeout = errors.New("timed out")

// waitFor polls f every 100 ms until it returns nil or d passes; it
// returns f's last error.
func waitFor(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s: %v", errTimeout, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
