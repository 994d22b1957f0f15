package dashboard_test

import (
	"context"
	"fmt"
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
	// Serve it with http.ListenAndServe("127.0.0.1:8080", d); here, one request:
	w := httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest("GET", "/fragment", nil))
	fmt.Println(w.Code, strings.Contains(w.Body.String(), "orders/42"))
	// Output: 200 true
}
