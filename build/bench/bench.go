// Package bench runs the benchmarks (bench/, its own module) and their smoke test.
package bench

import (
	"context"
	"fmt"

	"github.com/craig/retention/build/binaries"
	"github.com/craig/retention/build/store"
	"github.com/craig/retention/build/workspace"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Bench groups the benchmark targets (bench/, bench/README.md).
type Bench mg.Namespace

// Run benchmarks the kernel against the ceiling and its peers on scratch databases and the S3 store (sizes: CRAIG_BENCH_* env), writing bench/results/<date>.json (alias: bench).
func (Bench) Run(ctx context.Context) error {
	mg.CtxDeps(ctx, binaries.Build, store.Store.Up)
	fmt.Println("==> go run ./bench/cmd/bench -rules-bin", workspace.ServiceBinary("rules"), "-security-bin", workspace.ServiceBinary("security"))
	return sh.RunV(mg.GoCmd(), "run", "./bench/cmd/bench", "-rules-bin", workspace.ServiceBinary("rules"), "-security-bin", workspace.ServiceBinary("security"))
}

// Smoke runs the benchmark at tiny sizes as its scratch test (TestBenchSmoke, also part of test); starts the S3 store.
func (Bench) Smoke(ctx context.Context) error {
	mg.CtxDeps(ctx, store.Store.Up)
	fmt.Println("==> go test -count=1 -run TestBenchSmoke ./bench")
	return sh.RunV(mg.GoCmd(), "test", "-count=1", "-run", "TestBenchSmoke", "./bench")
}
