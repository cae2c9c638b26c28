# Reliability runs at full scale: 100k reads under 10% injected S3
# faults, 20 kill -9 rounds, full and read-only cache disks, 64-reader load,
# mirrors of 2,000 files (replica killed, faulty, slow, disagreeing).
# `make test` runs the same tests at a small scale. Figures: RELIABILITY.md.

.PHONY: reliability
## reliability: the fault, crash, disk-full and leak tests at full scale (needs root; ~15 min).
reliability: tools
	RELIABILITY_READS=100000 RELIABILITY_ROUNDS=20 RELIABILITY_LOAD_SECONDS=30 \
		RELIABILITY_MIRROR_FILES=2000 RELIABILITY_MIRROR_EPOCHS=5 \
		$(GO) test -count=1 -timeout 60m -v -run . ./reliability/ 2>&1 | tee reliability.log | grep -E 'RESULT|^(---|ok|FAIL)'
