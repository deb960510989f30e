"""What is sent: the requests of a level (`builder`: exact prompt tokens, unique prefixes) and the
sizes of every fairness check (`fairness_plan`). Pure functions of the configuration and the server's
recorded shape; the deriving side may read them."""
