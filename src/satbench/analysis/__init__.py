"""From raw records to results: every lane and level summarized (`analyze`), the fairness
verdicts and their guards (`verdicts`, `guards`), and the results.json / verdicts.json model (`results`)."""
