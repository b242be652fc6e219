"""One host's story, whichever role tells it: its terms (terms.py), its pace in a worker (paces.py), the
throttle's learnt delay (learnt_delays.py), its rate booked across the namespace (rates.py), its breaker
(breakers.py), its tasks set aside in a worker (set_aside.py), how claims spread a batch over hosts
(claims.py), its counters and gauges (counts.py), and whether its render="auto" pages need a browser
(render_choices.py). The download chain's links and the backends' ports use these; nothing here sends a request
or knows a backend."""
