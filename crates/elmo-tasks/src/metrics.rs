//! Task metrics: accuracy, CoNLL span F1 over BIO / BIOES tags (per type and micro-averaged,
//! as `conlleval` counts: a span is correct when its type and both boundaries match), and a
//! summary of the most frequent confusions.

use std::collections::{BTreeMap, HashMap};

/// A labelled span `[start, end)` of a type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// Entity type (`PER`, `loc`, ...).
    pub kind: String,
    /// First token.
    pub start: usize,
    /// One past the last token.
    pub end: usize,
}

/// Whether a tag set uses BIO / BIOES prefixes (every tag is `O` or `X-type`, X in B I E S).
pub fn is_span_tagging<'a>(tags: impl IntoIterator<Item = &'a str>) -> bool {
    let mut any_prefixed = false;
    for tag in tags {
        if tag == "O" {
            continue;
        }
        match tag.split_once('-') {
            Some((prefix, kind)) if ["B", "I", "E", "S"].contains(&prefix) && !kind.is_empty() => {
                any_prefixed = true;
            }
            _ => return false,
        }
    }
    any_prefixed
}

/// The spans of a BIO or BIOES tag sequence. An `I-`/`E-` that does not continue a span of its
/// type starts a new one (conlleval's lenient reading).
pub fn spans(tags: &[impl AsRef<str>]) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut open: Option<(String, usize)> = None;
    let close = |open: &mut Option<(String, usize)>, end: usize, spans: &mut Vec<Span>| {
        if let Some((kind, start)) = open.take() {
            spans.push(Span { kind, start, end });
        }
    };
    for (i, tag) in tags.iter().enumerate() {
        let tag = tag.as_ref();
        let Some((prefix, kind)) = tag.split_once('-') else {
            close(&mut open, i, &mut spans);
            continue;
        };
        let continues = matches!(&open, Some((k, _)) if k == kind);
        match prefix {
            "B" | "S" => {
                close(&mut open, i, &mut spans);
                open = Some((kind.to_string(), i));
            }
            _ if !continues => {
                close(&mut open, i, &mut spans);
                open = Some((kind.to_string(), i));
            }
            _ => {}
        }
        if prefix == "S" || prefix == "E" {
            close(&mut open, i + 1, &mut spans);
        }
    }
    close(&mut open, tags.len(), &mut spans);
    spans
}

/// Precision, recall and F1 (in %) of one type or of all.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpanScore {
    /// Correct spans.
    pub correct: usize,
    /// Predicted spans.
    pub predicted: usize,
    /// Gold spans.
    pub gold: usize,
}

impl SpanScore {
    /// Precision in %.
    pub fn precision(&self) -> f64 {
        100.0 * self.correct as f64 / self.predicted.max(1) as f64
    }
    /// Recall in %.
    pub fn recall(&self) -> f64 {
        100.0 * self.correct as f64 / self.gold.max(1) as f64
    }
    /// F1 in % (0 when nothing is correct).
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }
}

/// Accumulates the metrics of a task over examples.
#[derive(Debug, Clone, Default)]
pub struct Scorer {
    correct: usize,
    total: usize,
    spans: BTreeMap<String, SpanScore>,
    confusions: HashMap<(String, String), usize>,
}

/// The final metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// Token accuracy (tagging) or example accuracy, in %.
    pub accuracy: f64,
    /// Micro-averaged span F1 (BIO / BIOES tagging only).
    pub span_f1: Option<f64>,
    /// Per-type span scores.
    pub per_type: BTreeMap<String, SpanScore>,
    /// The most frequent (gold, predicted, count) errors.
    pub confusions: Vec<(String, String, usize)>,
}

impl Scorer {
    /// Adds one example's gold and predicted labels (tags of a sentence, or one label).
    pub fn add(&mut self, gold: &[impl AsRef<str>], predicted: &[impl AsRef<str>], span_f1: bool) {
        for (g, p) in gold.iter().zip(predicted) {
            let (g, p) = (g.as_ref(), p.as_ref());
            self.total += 1;
            if g == p {
                self.correct += 1;
            } else {
                *self
                    .confusions
                    .entry((g.to_string(), p.to_string()))
                    .or_default() += 1;
            }
        }
        if span_f1 {
            let gold = spans(gold);
            let predicted = spans(predicted);
            for span in &gold {
                self.spans.entry(span.kind.clone()).or_default().gold += 1;
            }
            for span in &predicted {
                let score = self.spans.entry(span.kind.clone()).or_default();
                score.predicted += 1;
                if gold.contains(span) {
                    score.correct += 1;
                }
            }
        }
    }

    /// The metrics so far; `span_f1` when span F1 was counted.
    pub fn finish(&self, span_f1: bool) -> Scores {
        let micro = self
            .spans
            .values()
            .fold(SpanScore::default(), |a, s| SpanScore {
                correct: a.correct + s.correct,
                predicted: a.predicted + s.predicted,
                gold: a.gold + s.gold,
            });
        let mut confusions: Vec<(String, String, usize)> = self
            .confusions
            .iter()
            .map(|((g, p), n)| (g.clone(), p.clone(), *n))
            .collect();
        confusions.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
        confusions.truncate(10);
        Scores {
            accuracy: 100.0 * self.correct as f64 / self.total.max(1) as f64,
            span_f1: span_f1.then(|| micro.f1()),
            per_type: self.spans.clone(),
            confusions,
        }
    }
}

impl std::fmt::Display for Scores {
    /// One line: `accuracy X` and, for span tagging, `span-f1 Y`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "accuracy {:.2}", self.accuracy)?;
        if let Some(f1) = self.span_f1 {
            write!(f, " span-f1 {f1:.2}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(kind: &str, start: usize, end: usize) -> Span {
        Span {
            kind: kind.into(),
            start,
            end,
        }
    }

    #[test]
    fn bio_and_bioes_spans() {
        let bio = ["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "B-LOC", "I-PER"];
        assert_eq!(
            spans(&bio),
            [
                span("PER", 0, 2),
                span("LOC", 3, 4),
                span("LOC", 4, 5),
                span("LOC", 5, 6),
                span("PER", 6, 7)
            ]
        );
        let bioes = ["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "S-LOC"];
        assert_eq!(
            spans(&bioes),
            [span("PER", 0, 1), span("LOC", 1, 4), span("LOC", 5, 6)]
        );
        assert!(is_span_tagging(["O", "B-PER", "I-PER"]));
        assert!(!is_span_tagging(["NN", "VB"]));
    }

    #[test]
    fn span_f1_counts_exact_matches() {
        let mut scorer = Scorer::default();
        // Gold: PER[0,2) LOC[3,4). Predicted: PER[0,1) (wrong boundary) LOC[3,4) (right).
        scorer.add(
            &["B-PER", "I-PER", "O", "B-LOC"],
            &["B-PER", "O", "O", "B-LOC"],
            true,
        );
        let scores = scorer.finish(true);
        assert_eq!(scores.accuracy, 75.0);
        // P = 1/2, R = 1/2.
        assert!((scores.span_f1.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(scores.per_type["LOC"].f1(), 100.0);
        assert_eq!(scores.per_type["PER"].f1(), 0.0);
        assert_eq!(scores.confusions, [("I-PER".into(), "O".into(), 1)]);
        assert_eq!(scores.to_string(), "accuracy 75.00 span-f1 50.00");
    }
}
