"""Commands: plookup generate / serve / bench / doctor / corpus / models, and the options they share."""
