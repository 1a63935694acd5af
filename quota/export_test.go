package quota

import "time"

// SetNow sets the meter's clock (and its plans').
func SetNow(m *Meter, now func() time.Time) { m.now = now }
