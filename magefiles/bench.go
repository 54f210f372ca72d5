//go:build mage

package main

import (
	"context"
	"fmt"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Bench groups the benchmark targets (bench/, README "Performance").
type Bench mg.Namespace

// Run benchmarks the kernel against the ceiling and its peers on scratch databases and the S3 store (sizes: CRAIG_BENCH_* env), writing bench/results/<date>.json (alias: bench).
func (Bench) Run(ctx context.Context) error {
	mg.CtxDeps(ctx, buildServices, Store.Up)
	fmt.Println("==> go run ./bench/cmd/bench -rules-bin", serviceBinary("rules"), "-security-bin", serviceBinary("security"))
	return sh.RunV(mg.GoCmd(), "run", "./bench/cmd/bench", "-rules-bin", serviceBinary("rules"), "-security-bin", serviceBinary("security"))
}

// Smoke runs the benchmark at tiny sizes as its scratch test (TestBenchSmoke, also part of test); starts the S3 store.
func (Bench) Smoke(ctx context.Context) error {
	mg.CtxDeps(ctx, Store.Up)
	fmt.Println("==> go test -count=1 -run TestBenchSmoke ./bench")
	return sh.RunV(mg.GoCmd(), "test", "-count=1", "-run", "TestBenchSmoke", "./bench")
}
