package experiment

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Confidence is the confidence level of the intervals reported: 99%, as in
// CR Figure 7.
const Confidence = 0.99

// Summary is the sample mean of independent replications with a Student-t
// confidence interval at level Confidence.
type Summary struct {
	Mean, Low, High float64
	N               int // replications
	Censored        int // replications that reached the horizon (their samples are lower bounds)
}

// Summarize returns the mean of xs and its Confidence interval. The low end
// is clamped at zero. With one sample the interval is [0, +Inf).
func Summarize(xs []float64) Summary {
	n := len(xs)
	if n == 0 {
		return Summary{Mean: math.NaN(), Low: math.NaN(), High: math.NaN()}
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n == 1 {
		return Summary{Mean: mean, Low: 0, High: math.Inf(1), N: 1}
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 1)}.Quantile(1 - (1-Confidence)/2)
	half := q * sd / math.Sqrt(float64(n))
	return Summary{Mean: mean, Low: max(0, mean-half), High: mean + half, N: n}
}
