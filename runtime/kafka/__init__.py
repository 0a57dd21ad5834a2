"""Kafka through aiokafka: the consumer and producer (``system``), topic administration
(``admin``), changelog topics (``changelog``), the job that runs on Kafka (``job``), broker outages
(``outage``), and loading and dumping topics from the command line (``load_dump``)."""
