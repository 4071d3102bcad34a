"""Commands: plookup generate / serve / bench / doctor / corpus / models / rpc-server, and the
options they share; the README's map lists its modules."""
