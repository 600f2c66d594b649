"""Reports on scored runs: reading runs (:mod:`.runs`), plots (:mod:`.plots`), the HTML report (:mod:`.html`)."""
