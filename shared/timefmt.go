package spool

import "time"

// AppendTime appends t as time.RFC3339Nano formats it (the form every
// time in the wire contract's JSON documents takes, json.Marshal's), a
// few times faster than t.AppendFormat: the documents and events a worker
// writes for every task carry several times, and formatting them was a
// noticeable share of its CPU. Years outside 0–9999 take AppendFormat.
func AppendTime(b []byte, t time.Time) []byte {
	_, off := t.Zone()
	sec := t.Unix() + int64(off)
	// Days since 0000-03-01 of the proleptic Gregorian calendar (the
	// civil-from-days algorithm), from days since 1970-01-01.
	days := sec / 86400
	rem := sec % 86400
	if rem < 0 {
		rem += 86400
		days--
	}
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	if y < 0 || y > 9999 {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	b = append4(b, int(y))
	b = append(b, '-')
	b = append2(b, int(m))
	b = append(b, '-')
	b = append2(b, int(d))
	b = append(b, 'T')
	b = append2(b, int(rem/3600))
	b = append(b, ':')
	b = append2(b, int(rem/60%60))
	b = append(b, ':')
	b = append2(b, int(rem%60))
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i >= 1; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	if off == 0 {
		return append(b, 'Z')
	}
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	b = append(b, sign)
	b = append2(b, off/3600)
	b = append(b, ':')
	return append2(b, off/60%60)
}

func append2(b []byte, v int) []byte { return append(b, byte('0'+v/10), byte('0'+v%10)) }

func append4(b []byte, v int) []byte {
	return append(b, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}
