package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/dashboard"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
	"github.com/leasehold-go/leasehold/timers"
)

const childEnv = "LEASEHOLD_DASHBOARD_CHILD"

func TestMain(m *testing.M) {
	childproc.Main(childEnv, holder)
	testenv.Main(m)
}

// holder is the child process: it holds DASH_KEY on the backend of its
// environment, prints "READY <owner>", and keeps it until its stdin closes.
func holder() error {
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	if _, err := l.TryAcquire(context.Background(), os.Getenv("DASH_KEY"), time.Minute); err != nil {
		return err
	}
	fmt.Println("READY", l.(lock.Owned).Owner())
	_, _ = os.Stdin.Read(make([]byte, 1))
	return nil
}

// chromium finds the browser; without it the test skips, or fails under
// LEASEHOLD_REQUIRE_BACKENDS=1 (scripts/test installs Debian's chromium).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium is not installed (apt-get install chromium; scripts/test does it as root)"
	if req, _ := strconv.ParseBool(os.Getenv("LEASEHOLD_REQUIRE_BACKENDS")); req {
		t.Fatal(msg + " and LEASEHOLD_REQUIRE_BACKENDS is set")
	}
	t.Skip(msg)
	return ""
}

// screenshotDir is where screenshots go: $LEASEHOLD_SCREENSHOTS, relative
// to the module root; "" for none.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("LEASEHOLD_SCREENSHOTS")
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return filepath.Join(root, dir)
		}
		parent := filepath.Dir(root)
		if parent == root {
			t.Fatal("no go.mod above the test's directory")
		}
		root = parent
	}
}

func browser(t *testing.T, ctx context.Context) context.Context {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	bctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	return bctx
}

// TestInChromium: headless Chromium loads the page and sees a lock held
// by another process; a grant taken after the page loaded appears without
// a reload (the live refresh); Retry on a dead job, confirmed in its
// dialog, takes it out of the dead set and puts it back in flight.
func TestInChromium(t *testing.T) {
	chrome := chromium(t)
	_ = chrome
	b := backends.Redis(t)
	url := "redis://" + testenv.Redis(t).Addr()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	key := "orders/" + run
	child := childproc.Start(t, append(b.Env, childEnv+"=1", "DASH_KEY="+key)...)
	owner := strings.TrimPrefix(child.Expect(t, "READY", 30*time.Second), "READY ")

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ns := "dashboard-test-" + run
	src, err := ops.Open(ctx, ops.Config{Backend: url, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	reg := src.Jobs
	// What an application's processes leave: jobs in flight and a dead
	// one, a semaphore, a leader, a timer.
	l := b.New(t)
	for i, owner := range []string{"worker-1", "worker-2"} {
		if _, err := reg.Track(ctx, jobs.Job{ID: fmt.Sprintf("invoice-%d", 100+i), Owner: owner}, jobs.DefaultTTL); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := reg.Track(ctx, jobs.Job{ID: "invoice-13", Owner: "worker-3", Attempt: 6}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Bury(ctx, dead.Ref(), "recovered 5 times (MaxRetries 5): its workers keep crashing"); err != nil {
		t.Fatal(err)
	}
	sem, err := semaphore.New(l, "pdf-render-"+run, 3)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		p, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(context.WithoutCancel(ctx))
	}
	lctx, stopLeader := context.WithCancel(ctx)
	elected := make(chan struct{})
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		_ = leader.Run(lctx, l, "billing-"+run, func(ctx context.Context) error { close(elected); <-ctx.Done(); return nil })
	}()
	defer func() { stopLeader(); <-leaderDone }()
	<-elected
	sched := testkit.Must(timers.New(l, timers.WithShutdownTimeout(time.Second)))
	ticked := make(chan struct{}, 1)
	if err := sched.Add(timers.Every("cleanup-"+run, time.Second, func(ctx context.Context) error {
		select {
		case ticked <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	sctx, stopSched := context.WithCancel(ctx)
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.Run(sctx) }()
	defer func() { stopSched(); <-schedDone }()
	<-ticked

	// A key held shared by two processes, and an all-of grant of two keys.
	shared := "config-" + run
	for _, sl := range []lock.Lock{l, b.New(t)} {
		h, err := sl.(lock.SharedLock).TryAcquireShared(ctx, shared, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.WithoutCancel(ctx))
	}
	grp, err := l.(lock.GroupLock).TryAcquireAll(ctx, []string{"{transfer-" + run + "}/a", "{transfer-" + run + "}/b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Release(context.WithoutCancel(ctx))
	gi, _, err := l.(lock.Inspector).Inspect(ctx, grp.Keys()[0])
	if err != nil || gi.Group == "" {
		t.Fatalf("Inspect of a group's key: %+v, %v", gi, err)
	}

	srv := httptest.NewServer(dashboard.New(src, dashboard.Options{AllowActions: true}))
	defer srv.Close()
	bctx := browser(t, ctx)
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL), chromedp.WaitVisible("#locks")); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(bctx, chromedp.Text("#locks"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, key) || !strings.Contains(text, owner) {
		t.Fatalf("the locks table does not show %s held by %s:\n%s", key, owner, text)
	}
	if !strings.Contains(text, shared) || !strings.Contains(text, "2 shared: ") || !strings.Contains(text, gi.Group) {
		t.Fatalf("the locks table does not show %s's two shares and the group %s:\n%s", shared, gi.Group, text)
	}
	leaders, err := chromedp.Run(bctx, chromedp.Text("#leaders"))
	if err != nil {
		t.Fatal(err)
	}
	if leaderOwner := l.(lock.Owned).Owner(); !strings.Contains(leaders, "billing-"+run) || !strings.Contains(leaders, leaderOwner) {
		t.Fatalf("the leaders table does not show billing-%s led by %s:\n%s", run, leaderOwner, leaders)
	}
	// Live refresh: a grant taken now shows up without a reload.
	later := "orders/later-" + run
	h, err := l.TryAcquire(ctx, later, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.WithoutCancel(ctx))
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf(`document.getElementById("locks").innerText.includes(%q)`, later))); err != nil {
		t.Fatalf("the new grant did not appear: %v", err)
	}
	if dir := screenshotDir(t); dir != "" {
		shot(t, bctx, filepath.Join(dir, "dashboard.png"))
	}
	// Retry the dead job through the page.
	if err := chromedp.Do(bctx, chromedp.Click(`tr[data-job="invoice-13"] button.retry`), chromedp.WaitVisible("#msg")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("no-dead") !== null`)); err != nil {
		t.Fatalf("the dead job is still listed: %v", err)
	}
	if dir := screenshotDir(t); dir != "" {
		shot(t, bctx, filepath.Join(dir, "dashboard-after-retry.png"))
	}
	if _, err := reg.DeadJob(ctx, "invoice-13"); err == nil {
		t.Fatal("invoice-13 is still in the dead set")
	}
	in, err := reg.(jobs.Inspector).InFlight(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range in {
		found = found || (j.ID == "invoice-13" && j.Attempt == 0)
	}
	if !found {
		t.Fatalf("invoice-13 is not back in flight at attempt 0: %+v", in)
	}
}

func shot(t *testing.T, ctx context.Context, path string) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// TestActionsGuarded: without --allow-actions, and without the page's
// token or from another site, a POST changes nothing.
func TestActionsGuarded(t *testing.T) {
	ctx := t.Context()
	mem := "mem://guarded-" + t.Name()
	src, err := ops.Open(ctx, ops.Config{Backend: mem})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := src.Jobs.Track(ctx, jobs.Job{ID: "d"}, time.Minute)
	if err := src.Jobs.Bury(ctx, j.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	// Requests come in on the servers' loopback listeners, with their
	// Host (the page's own, as a browser sends it).
	post := func(h http.Handler, form url.Values, hdr map[string]string) int {
		srv := httptest.NewServer(h)
		defer srv.Close()
		r, _ := http.NewRequest("POST", srv.URL+"/jobs/purge", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		resp, err := noRedirect.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	readOnly := dashboard.New(src, dashboard.Options{})
	if code := post(readOnly, url.Values{"id": {"d"}}, nil); code != http.StatusForbidden {
		t.Fatalf("read-only dashboard: %d, want 403", code)
	}
	d := dashboard.New(src, dashboard.Options{AllowActions: true})
	if code := post(d, url.Values{"id": {"d"}, "csrf": {"guess"}}, nil); code != http.StatusForbidden {
		t.Fatalf("wrong token: %d, want 403", code)
	}
	// The page carries the token; another site's form posting it is refused.
	body := get(t, d, "/", nil).body
	i := strings.Index(body, `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no token in the page:\n%s", body)
	}
	token := body[i+len(`name="csrf" value="`):]
	token = token[:strings.Index(token, `"`)]
	form := url.Values{"id": {"d"}, "csrf": {token}, "confirm": {"yes"}}
	if code := post(d, form, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site: %d, want 403", code)
	}
	if code := post(d, form, map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Fatalf("other origin: %d, want 403", code)
	}
	if c, _ := src.Jobs.(jobs.Inspector).Counts(ctx); c.Dead != 1 {
		t.Fatalf("a refused action changed the registry: %+v", c)
	}
	if code := post(d, form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "null"}); code != http.StatusSeeOther {
		t.Fatalf("same-origin purge: %d, want 303", code)
	}
	if code := post(d, form, nil); code != http.StatusNotFound {
		t.Fatalf("purge of a purged job: %d, want 404", code)
	}
}
