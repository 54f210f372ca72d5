package bench

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

const (
	// bootstrapResamples is how many resamples each interval draws.
	bootstrapResamples = 1000
	// bootstrapSeed makes every interval reproducible from the samples.
	bootstrapSeed = 20261201
)

// sortedMS returns the latencies in ms, sorted.
func sortedMS(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = ms(x)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// rankOf is the nearest-rank percentile p of sorted s.
func rankOf(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	rank := min(max(int(math.Ceil(p/100*float64(len(s)))), 1), len(s))
	return s[rank-1]
}

// resample draws len(s) values of sorted s with replacement and returns
// them sorted (by counting: s is sorted, so the draw's sorted order is the
// indexes' sorted order).
func resample(rng *rand.Rand, s []float64, counts []int, out []float64) []float64 {
	clear(counts)
	for range s {
		counts[rng.IntN(len(s))]++
	}
	out = out[:0]
	for i, c := range counts {
		for range c {
			out = append(out, s[i])
		}
	}
	return out
}

// interval is the 2.5th and 97.5th percentiles of vals.
func interval(vals []float64) [2]float64 {
	slices.SortFunc(vals, cmp.Compare)
	return [2]float64{round3(rankOf(vals, 2.5)), round3(rankOf(vals, 97.5))}
}

// percentileCIs bootstraps the 95% intervals of the percentiles ps of d.
func percentileCIs(d []time.Duration, ps ...float64) [][2]float64 {
	s := sortedMS(d)
	out := make([][2]float64, len(ps))
	if len(s) == 0 {
		return out
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(s))))
	vals := make([][]float64, len(ps))
	counts, buf := make([]int, len(s)), make([]float64, 0, len(s))
	for range bootstrapResamples {
		buf = resample(rng, s, counts, buf)
		for i, p := range ps {
			vals[i] = append(vals[i], rankOf(buf, p))
		}
	}
	for i := range ps {
		out[i] = interval(vals[i])
	}
	return out
}

// ratioCI bootstraps the 95% interval of p99(num) ÷ p99(den), each pool
// resampled on its own.
func ratioCI(num, den []time.Duration) [2]float64 {
	a, b := sortedMS(num), sortedMS(den)
	if len(a) == 0 || len(b) == 0 {
		return [2]float64{}
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(a))<<32|uint64(len(b))))
	ca, cb := make([]int, len(a)), make([]int, len(b))
	ba, bb := make([]float64, 0, len(a)), make([]float64, 0, len(b))
	vals := make([]float64, 0, bootstrapResamples)
	for range bootstrapResamples {
		ba, bb = resample(rng, a, ca, ba), resample(rng, b, cb, bb)
		if d := rankOf(bb, 99); d > 0 {
			vals = append(vals, rankOf(ba, 99)/d)
		}
	}
	return interval(vals)
}

// summarize sets the pooled figures, their intervals, the curve and its
// knee from the pools.
func (res *WriterResult) summarize(pools writerPools) {
	alone := pools[cfgAlone]
	aloneP99 := percentile(alone, 99)
	ratio := func(d []time.Duration) float64 {
		if aloneP99 == 0 {
			return 0
		}
		return round3(percentile(d, 99) / aloneP99)
	}
	rates := map[string][]float64{}
	for _, run := range res.Runs {
		key := run.Config
		if run.YieldBatch >= 0 {
			key = curveKey(run.YieldBatch)
		}
		if run.DrainRowsPerSec > 0 {
			rates[key] = append(rates[key], run.DrainRowsPerSec)
		}
	}
	for _, name := range writerConfigs {
		d := pools[name]
		cis := percentileCIs(d, 50, 99, 99.9)
		c := WriterConfig{Name: name, Samples: len(d), P50MS: percentile(d, 50), P99MS: percentile(d, 99), P999MS: percentile(d, 99.9),
			P50CI: cis[0], P99CI: cis[1], P999CI: cis[2], P99Ratio: ratio(d), P99RatioCI: ratioCI(d, alone),
			DrainRowsPerSec: median(rates[name])}
		res.Configs = append(res.Configs, c)
		if name == cfgWithDrain {
			res.P99Ratio, res.P99RatioCI = c.P99Ratio, c.P99RatioCI
		}
	}
	for _, yb := range writerCurve {
		d := pools[curveKey(yb)]
		res.Curve = append(res.Curve, WriterCurvePoint{YieldBatch: yb, DrainRowsPerSec: median(rates[curveKey(yb)]), Samples: len(d),
			P99MS: percentile(d, 99), P99Ratio: ratio(d), P99RatioCI: ratioCI(d, alone)})
	}
	res.KneeYieldBatch = knee(res.Curve)
}

// knee picks the fastest curve point whose ratio is at most 1.2, or within
// a tenth of the best ratio when none is.
func knee(curve []WriterCurvePoint) int {
	if len(curve) == 0 {
		return 0
	}
	best := curve[0].P99Ratio
	for _, c := range curve {
		best = min(best, c.P99Ratio)
	}
	bound := max(1.2, best*1.1)
	pick := -1
	for i, c := range curve {
		if c.P99Ratio <= bound && (pick < 0 || c.DrainRowsPerSec > curve[pick].DrainRowsPerSec) {
			pick = i
		}
	}
	return curve[max(pick, 0)].YieldBatch
}

// floorRatio is the writer's p99 with the drain ÷ its p99 beside one
// CPU-only backend, each pair from the same round: the median of the
// rounds' ratios, and its bootstrap 95% interval (every round's two pools
// resampled on their own, the median of the rounds' ratios taken each
// time).
func floorRatio(drain, floor [][]time.Duration) (float64, [2]float64) {
	type pair struct{ a, b []float64 }
	var pairs []pair
	var ratios []float64
	for i := range min(len(drain), len(floor)) {
		a, b := sortedMS(drain[i]), sortedMS(floor[i])
		if len(a) == 0 || len(b) == 0 || rankOf(b, 99) <= 0 {
			continue
		}
		pairs = append(pairs, pair{a, b})
		ratios = append(ratios, rankOf(a, 99)/rankOf(b, 99))
	}
	if len(pairs) == 0 {
		return 0, [2]float64{}
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(pairs))))
	vals := make([]float64, 0, bootstrapResamples)
	round := make([]float64, len(pairs))
	for range bootstrapResamples {
		for i, p := range pairs {
			ra := resample(rng, p.a, make([]int, len(p.a)), nil)
			rb := resample(rng, p.b, make([]int, len(p.b)), nil)
			round[i] = rankOf(ra, 99) / max(rankOf(rb, 99), 1e-9)
		}
		vals = append(vals, median(round))
	}
	return round3(median(ratios)), interval(vals)
}
