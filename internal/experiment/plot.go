package experiment

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/catena-kv/catena/internal/placement"
)

// replicaColors gives each chain length t its line colour.
var replicaColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// errorPoints is a line's points with their confidence intervals.
type errorPoints struct {
	plotter.XYs
	low, high []float64 // distances below and above each point
}

func (e errorPoints) YError(i int) (float64, float64) { return e.low[i], e.high[i] }

// PlotFig7 draws MTBU (log scale) against the number of servers, one line
// per chain length with its confidence intervals, one panel per strategy
// side by side on a shared scale, and writes it as a PNG.
func PlotFig7(path string, points []Fig7Point, title string) error {
	var strategies []placement.Strategy
	yMin, yMax := math.Inf(1), math.Inf(-1)
	for _, p := range points {
		if len(strategies) == 0 || strategies[len(strategies)-1] != p.Strategy {
			strategies = append(strategies, p.Strategy)
		}
		if p.Low > 0 {
			yMin = min(yMin, p.Low)
		}
		yMin = min(yMin, p.Mean)
		yMax = max(yMax, p.High, p.Mean)
	}
	if len(strategies) == 0 {
		return fmt.Errorf("no points to plot")
	}
	// A decade of room below the lowest point for the legend.
	yMin = math.Pow(10, math.Floor(math.Log10(yMin))-1)
	yMax = math.Pow(10, math.Ceil(math.Log10(yMax)))

	letters := "abcdefgh"
	plots := make([][]*plot.Plot, 1)
	for i, s := range strategies {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("(%c) %s", letters[i%len(letters)], fig7Label(s))
		p.X.Label.Text = "number of servers"
		p.Y.Label.Text = "MTBU (hours, log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = yMin, yMax
		p.Legend.Top = false
		p.Legend.Left = true
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(6)
		p.Add(plotter.NewGrid())
		byT := map[int]*errorPoints{}
		var ts []int
		for _, pt := range points {
			if pt.Strategy != s {
				continue
			}
			e := byT[pt.Replicas]
			if e == nil {
				e = &errorPoints{}
				byT[pt.Replicas] = e
				ts = append(ts, pt.Replicas)
			}
			e.XYs = append(e.XYs, plotter.XY{X: float64(pt.Servers), Y: pt.Mean})
			low := max(pt.Low, yMin) // a clamped low end still draws on a log axis
			e.low = append(e.low, pt.Mean-low)
			e.high = append(e.high, pt.High-pt.Mean)
		}
		for _, t := range ts {
			if err := addLineWithErrors(p, fmt.Sprintf("t = %d", t), replicaColors[(t-1)%len(replicaColors)], *byT[t]); err != nil {
				return err
			}
		}
		plots[0] = append(plots[0], p)
	}

	const panelWidth, height = 5 * vg.Inch, 4.5 * vg.Inch
	return saveTitledPanelRow(path, title, plots[0], panelWidth, height)
}

// addLineWithErrors adds a line with points, its confidence intervals as
// error bars, and a legend entry.
func addLineWithErrors(p *plot.Plot, name string, c color.Color, e errorPoints) error {
	line, pts, err := plotter.NewLinePoints(e.XYs)
	if err != nil {
		return err
	}
	line.Color, pts.Color = c, c
	line.Width = vg.Points(1.5)
	pts.Shape = draw.CircleGlyph{}
	pts.Radius = vg.Points(2)
	bars, err := plotter.NewYErrorBars(e)
	if err != nil {
		return err
	}
	bars.Color = c
	bars.CapWidth = vg.Points(4)
	p.Add(line, pts, bars)
	p.Legend.Add(name, line, pts)
	return nil
}
