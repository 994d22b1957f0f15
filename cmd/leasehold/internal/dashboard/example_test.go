package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/dashboard"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
)

func ExampleNew() {
	ctx := context.Background()
	src, _ := ops.Open(ctx, ops.Config{Backend: "mem://dashboard-example"})
	defer src.Close()
	_, _ = src.Lock.TryAcquire(ctx, "orders/42", time.Minute)
	d := dashboard.New(src, dashboard.Options{}) // read-only
	// Serve it on a loopback listener (it answers requests for
	// 127.0.0.1, localhost and [::1] on the listener's port only):
	srv := httptest.NewServer(d)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/fragment")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "orders/42"))
	// Output: 200 true
}
