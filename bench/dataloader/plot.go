package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// workerColors keeps a worker count's colour the same across plots.
var workerColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// WritePNG plots the median images/s of every source (local disk, near and
// far, cold and warm) as bars, one bar per worker count.
func (r *Report) WritePNG(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("PyTorch DataLoader, one epoch of %d JPEGs (median of %d rounds; far = +%s per request)", r.Images, r.Rounds, r.Latency)
	p.Y.Label.Text = "images/s"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	cells := r.cells()
	names := make([]string, len(cells))
	for i, c := range cells {
		names[i] = c.Name()
	}
	top := 0.0
	for _, v := range r.Runs {
		top = max(top, median(v))
	}
	width := vg.Points(min(60/float64(max(len(r.Workers), 1)), 18))
	for i, w := range r.Workers {
		vals := make(plotter.Values, len(cells))
		for j, c := range cells {
			c.Workers = w
			vals[j] = median(r.Runs[c])
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = workerColors[i%len(workerColors)]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(len(r.Workers)-1)/2) * width
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%d workers", w), bars)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 5
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.Y.Min, p.Y.Max = 0, top*1.12 // room for the legend
	return p.Save(11*vg.Inch, 6*vg.Inch, path)
}
