//! Brown corpus tags (472 fine tags with `-tl`/`-hl`/`-nc`/`fw-` modifiers and `+` contractions)
//! mapped to the 12 universal tags of Petrov et al. (2012), after NLTK's `en-brown.map`.

/// The coarse (universal) tag of a Brown tag: the `fw-` prefix gives `X`; title, headline and
/// cited-word suffixes are dropped; a contraction takes its first part; `*` (negation) and `$`
/// (possessive) are dropped except in pronoun tags.
pub fn coarse_tag(fine: &str) -> &'static str {
    let tag = fine.to_ascii_lowercase();
    if tag.starts_with("fw-") || tag == "fw" {
        return "X";
    }
    let mut base = tag.split('+').next().unwrap_or("").to_string();
    for suffix in ["-tl", "-hl", "-nc"] {
        while let Some(position) = base.find(suffix) {
            base.replace_range(position..position + suffix.len(), "");
        }
    }
    if base.len() > 1 {
        base = base.trim_end_matches('*').to_string();
    }
    let pronoun = base.starts_with("pp") || base.starts_with("pn") || base.starts_with("wp");
    let base = if pronoun {
        base.as_str()
    } else {
        base.trim_end_matches('$')
    };
    match base {
        "." | "," | ":" | "--" | "(" | ")" | "``" | "''" | "'" | "\"" => ".",
        "*" => "ADV",
        "cc" => "CONJ",
        "cs" | "in" => "ADP",
        "to" | "rp" => "PRT",
        "cd" => "NUM",
        "od" => "ADJ",
        "ex" => "DET",
        "uh" | "nil" => "X",
        _ if pronoun => "PRON",
        _ => match base {
            "nn" | "nns" | "np" | "nps" | "nr" | "nrs" => "NOUN",
            "jj" | "jjr" | "jjs" | "jjt" => "ADJ",
            "rb" | "rbr" | "rbt" | "rn" | "ql" | "qlp" | "wql" | "wrb" | "abl" => "ADV",
            "at" | "ap" | "abn" | "abx" | "dt" | "dti" | "dts" | "dtx" | "wdt" => "DET",
            b if b.starts_with("vb")
                || b.starts_with("be")
                || b.starts_with("hv")
                || b.starts_with("do")
                || b == "md" =>
            {
                "VERB"
            }
            _ => "X",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::coarse_tag;

    #[test]
    fn maps_modifiers_contractions_and_families() {
        let cases = [
            ("at", "DET"),
            ("np-tl", "NOUN"),
            ("nn$-tl", "NOUN"),
            ("vbd", "VERB"),
            ("bedz*", "VERB"),
            ("md*", "VERB"),
            ("ppss+md", "PRON"),
            ("pp$$", "PRON"),
            ("wdt+bez", "DET"),
            ("fw-nn", "X"),
            ("jj-tl-hl", "ADJ"),
            ("*", "ADV"),
            ("``", "."),
            (".-hl", "."),
            ("cs", "ADP"),
            ("to", "PRT"),
            ("cd$", "NUM"),
        ];
        for (fine, coarse) in cases {
            assert_eq!(coarse_tag(fine), coarse, "{fine}");
        }
    }
}
