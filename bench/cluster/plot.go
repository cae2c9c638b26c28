package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeSVG (a PNG when path ends in .png) plots, per epoch, the backend bytes (% of D) and the cluster hit
// ratio of each sampler run (C/D, scope): two panels side by side. The
// "every node reads every file" runs are left out (another workload).
func writeSVG(path string, rows []row) error {
	type series struct {
		name string
		pts  plotter.XYs
		hit  plotter.XYs
	}
	var order []string
	by := map[string]*series{}
	maxEpoch := 1
	for _, r := range rows {
		if strings.Contains(r.scope, "every node") {
			continue
		}
		name := "C = D×" + r.frac + ", " + r.scope
		s := by[name]
		if s == nil {
			s = &series{name: name}
			by[name] = s
			order = append(order, name)
		}
		s.pts = append(s.pts, plotter.XY{X: float64(r.epoch), Y: 100 * float64(r.backendBytes) / float64(r.total)})
		s.hit = append(s.hit, plotter.XY{X: float64(r.epoch), Y: r.clusterHit})
		maxEpoch = max(maxEpoch, r.epoch)
	}
	backend, hit := plot.New(), plot.New()
	backend.Title.Text = "Backend bytes per epoch (3 mounts)"
	backend.Y.Label.Text = "backend bytes, % of D"
	backend.Y.Min, backend.Y.Max = 0, 105
	hit.Title.Text = "Cluster hit ratio per epoch"
	hit.Y.Label.Text = "1 − backend bytes / bytes read"
	// Room above 1 for the legend; ticks only over [0, 1].
	hit.Y.Min, hit.Y.Max = 0, 1.5
	hit.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}})
	for _, p := range []*plot.Plot{backend, hit} {
		p.X.Label.Text = "epoch"
		p.X.Min, p.X.Max = 0.8, float64(maxEpoch)+0.2
		p.X.Tick.Marker = epochTicks(maxEpoch)
		p.Add(plotter.NewGrid())
	}
	hit.Legend.Top, hit.Legend.Left = true, true
	hit.Legend.XOffs = vg.Points(10)
	for i, name := range order {
		s := by[name]
		c := seriesColor(name)
		for _, pl := range []struct {
			p   *plot.Plot
			pts plotter.XYs
		}{{backend, s.pts}, {hit, s.hit}} {
			l, pts, err := plotter.NewLinePoints(pl.pts)
			if err != nil {
				return err
			}
			l.Color, pts.Color = c, c
			pts.Shape = draw.GlyphDrawer([]draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.PlusGlyph{}, draw.CrossGlyph{}}[i%5])
			if strings.Contains(name, "1/6") {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			pl.p.Add(l, pts)
			if pl.p == hit {
				hit.Legend.Add(name, l, pts)
			}
		}
	}
	w, h := vg.Points(1000), vg.Points(420)
	var img interface {
		vg.CanvasSizer
		io.WriterTo
	} = vgsvg.New(w, h)
	if strings.HasSuffix(path, ".png") {
		img = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	}
	dc := draw.New(img)
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(10), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	cs := plot.Align([][]*plot.Plot{{backend, hit}}, t, dc)
	backend.Draw(cs[0][0])
	hit.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := img.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// seriesColor: node scope grey, cluster scope red, plain rendezvous blue.
func seriesColor(name string) color.Color {
	switch {
	case strings.Contains(name, "plain"):
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	case strings.Contains(name, "cluster"):
		return color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	default:
		return color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	}
}

type epochTicks int

func (n epochTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for e := 1; e <= int(n); e++ {
		ts = append(ts, plot.Tick{Value: float64(e), Label: fmt.Sprint(e)})
	}
	return ts
}
