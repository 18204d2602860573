//! The metric handles the server updates. With the `metrics` feature (on
//! by default) each update goes to prometheus's metric inside; without
//! it every update compiles to nothing, so a build without metrics shows
//! what they cost on the hot path (`docs/benchmarks.md`). Either way the
//! metrics are registered and `/metrics` answers.

use prometheus::core::Collector;

/// A metric handle around prometheus's `$inner`.
macro_rules! handle {
    ($name:ident, $inner:ty) => {
        #[derive(Clone)]
        pub struct $name(pub(super) $inner);

        impl $name {
            /// The prometheus metric, for registering.
            pub(super) fn collector(&self) -> Box<dyn Collector> {
                Box::new(self.0.clone())
            }
        }
    };
}

/// One update method, forwarded only with the `metrics` feature.
macro_rules! update {
    ($name:ident, $method:ident($($arg:ident: $ty:ty),*)) => {
        impl $name {
            #[inline]
            #[allow(unused_variables)]
            pub fn $method(&self, $($arg: $ty),*) {
                #[cfg(feature = "metrics")]
                self.0.$method($($arg),*);
            }
        }
    };
}

handle!(Counter, prometheus::IntCounter);
update!(Counter, inc());
update!(Counter, inc_by(value: u64));

handle!(Gauge, prometheus::IntGauge);
update!(Gauge, set(value: i64));
update!(Gauge, add(value: i64));
update!(Gauge, sub(value: i64));
update!(Gauge, inc());
update!(Gauge, dec());

handle!(FloatGauge, prometheus::Gauge);
update!(FloatGauge, set(value: f64));

handle!(Histogram, prometheus::Histogram);
update!(Histogram, observe(value: f64));

handle!(HistogramVec, prometheus::HistogramVec);
impl HistogramVec {
    pub fn with_label_values(&self, values: &[&str]) -> Histogram {
        Histogram(self.0.with_label_values(values))
    }
}

handle!(CounterVec, prometheus::IntCounterVec);
impl CounterVec {
    pub fn with_label_values(&self, values: &[&str]) -> Counter {
        Counter(self.0.with_label_values(values))
    }
}

handle!(GaugeVec, prometheus::IntGaugeVec);
impl GaugeVec {
    pub fn with_label_values(&self, values: &[&str]) -> Gauge {
        Gauge(self.0.with_label_values(values))
    }
}
