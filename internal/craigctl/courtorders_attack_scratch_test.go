package craigctl_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// One court order (one docket) names two children: expunge case:17 and
// case:18 under the same --order-ref. The second request must be filed.
func TestOrderAttack2TwoSubjectsOneOrderRef(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var pending []map[string]any
	expunge := func(id string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var b map[string]any
			_ = json.NewDecoder(r.Body).Decode(&b)
			mu.Lock()
			pending = append(pending, map[string]any{"expunge_id": id, "status": "awaiting_approval", "order_ref": b["order_ref"], "archives": []string{}, "requested_by": "ops:alice"})
			mu.Unlock()
			answer(202, `{"expunge_id":"`+id+`","archives":[]}`)(w, r)
		}
	}
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /admin/subjects/orders": func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			b, _ := json.Marshal(map[string]any{"seals": []any{}, "expungements": pending})
			answer(200, string(b))(w, r)
		},
		"POST /admin/subjects/case:17/expunge": expunge("11111111-1111-4111-8111-111111111111"),
		"POST /admin/subjects/case:18/expunge": expunge("22222222-2222-4222-8222-222222222222"),
	})
	r1 := run(t, "", false, env(f), "subject", "expunge", "case:17", "--service", "rules", "--order-ref", "JV-2026-9", "--reason", "two siblings", "--yes")
	require.Equal(t, 0, r1.code, r1.errOut)
	r2 := run(t, "", false, env(f), "subject", "expunge", "case:18", "--service", "rules", "--order-ref", "JV-2026-9", "--reason", "two siblings", "--yes")
	require.Equal(t, 0, r2.code, r2.errOut)
	filed := false
	for _, c := range f.seen() {
		if c.Method == "POST" && strings.Contains(c.Path, "case:18") {
			filed = true
		}
	}
	if !filed {
		t.Errorf("FINDING: case:18's expungement under the same order ref was never filed, yet craigctl exited 0 printing case:17's order: %s", r2.out)
	}
}
