package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// policyColors keeps a policy's colour the same across plots.
var policyColors = map[string]color.Color{
	"nr":      color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"lru":     color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"fifo":    color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"random":  color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	"tinylfu": color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// WritePNG plots the mean byte hit ratio of epochs ≥ 2 against C/D, one
// line per policy, with the optimum min(C/D, 1) as a dashed line.
func (rep *Report) WritePNG(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Byte hit ratio, shuffled epochs 2–%d (%d files, %.0f MB, real mounts)", rep.Epochs, rep.Files, float64(rep.Bytes)/1e6)
	p.X.Label.Text = "cache size / dataset size (C/D)"
	p.Y.Label.Text = "byte hit ratio (mean of epochs ≥ 2)"
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 1.05
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	var maxX float64
	for _, f := range rep.Fractions {
		maxX = max(maxX, f)
	}
	opt := plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}, {X: max(maxX, 1), Y: 1}}
	optLine, err := plotter.NewLine(opt)
	if err != nil {
		return err
	}
	optLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	optLine.Color = color.Gray{Y: 0x80}
	p.Add(optLine)
	p.Legend.Add("optimum min(C/D, 1)", optLine)

	for i, pol := range rep.Policies {
		var xys plotter.XYs
		for _, r := range rep.Runs {
			if r.Policy == pol {
				xys = append(xys, plotter.XY{X: r.Fraction, Y: r.Mean()})
			}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c, ok := policyColors[pol]
		if !ok {
			c = color.Black
		}
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = shapes[i%len(shapes)]
		points.Radius = vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(pol, line, points)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

var shapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.BoxGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PyramidGlyph{},
}
