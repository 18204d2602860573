module tlspeek

go 1.22
