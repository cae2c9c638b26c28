package source

// PolicyNR is the cache policy a volume may ask for: NR (no replacement),
// the only one (the cache's PolicyNR). Benchmarks compare others, which no
// volume can name.
const PolicyNR = "nr"
