package experiment

import (
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one line of a panel.
type series struct {
	Name string
	XYs  plotter.XYs
}

// panel is one plot of a figure: its lines share the axes.
type panel struct {
	Title          string
	XLabel, YLabel string
	Series         []series
	// YMin, YMax fix the Y range when YMax > 0.
	YMin, YMax float64
	// LogY draws the Y axis on a log scale.
	LogY bool
	// LegendBottomLeft moves the legend from the top right corner.
	LegendBottomLeft bool
}

// seriesColors gives the i-th line of a panel its colour.
var seriesColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

// plotPanels draws panels side by side, each a set of lines with points,
// and writes the figure as a PNG.
func plotPanels(path string, panels []panel) error {
	row := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = pn.XLabel
		p.Y.Label.Text = pn.YLabel
		if pn.LogY {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		if pn.YMax > 0 {
			p.Y.Min, p.Y.Max = pn.YMin, pn.YMax
		}
		p.Legend.Top, p.Legend.Left = !pn.LegendBottomLeft, pn.LegendBottomLeft
		p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), vg.Points(6)
		if !pn.LegendBottomLeft {
			p.Legend.XOffs, p.Legend.YOffs = vg.Points(-6), vg.Points(-6)
		}
		p.Add(plotter.NewGrid())
		for j, s := range pn.Series {
			line, pts, err := plotter.NewLinePoints(s.XYs)
			if err != nil {
				return err
			}
			c := seriesColors[j%len(seriesColors)]
			line.Color, pts.Color = c, c
			line.Width = vg.Points(1.5)
			pts.Shape = draw.CircleGlyph{}
			pts.Radius = vg.Points(1.5)
			p.Add(line, pts)
			p.Legend.Add(s.Name, line, pts)
		}
		row[i] = p
	}
	const panelWidth, height = 5 * vg.Inch, 4 * vg.Inch
	img := vgimg.New(panelWidth*vg.Length(len(panels)), height)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Points(8), PadY: vg.Points(4), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	dc := draw.New(img)
	for i := range row {
		row[i].Draw(tiles.At(dc, i, 0))
	}
	return savePNG(path, img)
}

// savePanelRow draws plots side by side, each panelWidth wide, aligned,
// into a PNG at path.
func savePanelRow(path string, row []*plot.Plot, panelWidth, height vg.Length) error {
	img := vgimg.New(panelWidth*vg.Length(len(row)), height)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(8), PadY: vg.Points(4), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, draw.New(img))
	for i := range row {
		row[i].Draw(canvases[0][i])
	}
	return savePNG(path, img)
}

// saveTitledPanelRow draws plots side by side under a title, each
// panelWidth wide, aligned, into a PNG at path.
func saveTitledPanelRow(path, title string, row []*plot.Plot, panelWidth, height vg.Length) error {
	n := vg.Length(len(row))
	img := vgimg.New(panelWidth*n, height)
	dc := draw.New(img)
	titleHeight := vg.Points(22)
	heading := draw.Crop(dc, 0, 0, height-titleHeight, 0)
	heading.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 12), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YCenter},
		vg.Point{X: panelWidth * n / 2, Y: height - titleHeight/2}, title)
	body := draw.Crop(dc, 0, 0, 0, -titleHeight)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Points(8), PadY: vg.Points(4), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, body)
	for i := range row {
		row[i].Draw(canvases[0][i])
	}
	return savePNG(path, img)
}

// savePNG writes a drawn figure to path as a PNG.
func savePNG(path string, img *vgimg.Canvas) error {
	return writeFile(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}
