"""A small, realistic sample corpus for demos and tests.

`make demo` ingests this corpus so the whole pipeline (parsing, chunking, situating headers,
embedding, hybrid search) can be exercised without any private documents, and the test-suite
uses it as a known input whose structure and facts are fixed in this module.

The corpus covers each kind of source the parsers handle:

* three PDFs with a two-level outline (a supply contract, a database post-mortem and an
  employee handbook), several pages each;
* one PDF without an outline, whose headings can only be recognised by font size and weight;
* a Markdown file with ``#``/``##``/``###`` headings and a fenced code block holding a line that
  starts with ``#`` (which is code, not a heading);
* a Python module with a docstring, top-level functions and two classes;
* a plain-text file whose paragraphs are separated by blank lines.

Every document carries distinctive facts (amounts, dates, names, identifiers) so that search
queries have one clearly right answer; `SAMPLE_QUERIES` lists a few of them.

PDF layout: headings use the base-14 font ``hebo`` (Helvetica-Bold) at 16 pt for level 1 and
13 pt for level 2, the document title ``hebo`` at 20 pt, body text ``helv`` (Helvetica) at 10 pt.
Text is wrapped and paginated here, line by line, and every line is checked to fit the page.
Output is deterministic: metadata dates are fixed and no random file identifier is written,
so repeated calls produce byte-identical files.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import pymupdf

__all__ = [
    "SAMPLE_PDFS",
    "SAMPLE_QUERIES",
    "SAMPLE_TEXT_FILES",
    "SamplePdf",
    "Section",
    "write_sample_corpus",
]


@dataclass(frozen=True)
class Section:
    """A heading (level 1 or 2) and the body paragraphs that follow it."""

    level: int
    title: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class SamplePdf:
    """Content and metadata of one generated PDF."""

    filename: str
    title: str
    author: str
    subject: str
    sections: tuple[Section, ...]
    preamble: tuple[str, ...] = ()
    with_outline: bool = True


def _section(level: int, title: str, *paragraphs: str) -> Section:
    return Section(level=level, title=title, paragraphs=paragraphs)


# --------------------------------------------------------------------------------------------
# (a) Supply agreement
# --------------------------------------------------------------------------------------------

SUPPLY_AGREEMENT = SamplePdf(
    filename="supply_agreement.pdf",
    title="Master Supply and Services Agreement",
    author="Northwind Cold Chain Logistics B.V.",
    subject="Agreement NCL-HSS-2024-017: temperature monitoring for fourteen depots",
    preamble=(
        "This Master Supply and Services Agreement, reference NCL-HSS-2024-017, is made between "
        "Northwind Cold Chain Logistics B.V., a company registered in Rotterdam, the Netherlands "
        '(the "Customer"), and Halvorsen Sensor Systems AS, a company registered in Stavanger, '
        'Norway (the "Supplier"). It takes effect on 1 March 2024 (the "Effective Date").',
    ),
    sections=(
        _section(
            1,
            "1. Definitions",
            "In this Agreement the following capitalised terms have the meanings set out below. "
            "Headings are for convenience only and do not affect interpretation, and references "
            "to a clause are to a clause of this Agreement unless stated otherwise.",
            '"Acceptance Certificate" means the written certificate issued by the Customer\'s '
            "project director, currently Ms. Ingrid Vos, confirming that a Phase has met its "
            'acceptance criteria. "Business Day" means a day other than a Saturday, a Sunday or '
            'a public holiday in the Netherlands. "Depot" means each of the fourteen '
            "temperature-controlled warehouses operated by the Customer and listed in Schedule 2, "
            "including the pilot depot at Waalhaven-Zuid, Rotterdam.",
            '"Sensor" means the Supplier\'s TL-40 wireless temperature and humidity logger, '
            "firmware release 4.x or later, together with its mounting kit and lithium battery "
            'pack. "Gateway" means the GW-8 cellular gateway that relays Sensor readings to the '
            'Platform. "Platform" means the Supplier\'s hosted monitoring service, marketed as '
            "Halvorsen Monitor, including its web console, alerting engine and data export "
            "interface.",
            '"Milestone" means each dated deliverable listed in Schedule 3, and "Milestone Fee" '
            "means the portion of the Charges payable on achievement of that Milestone. "
            '"Contract Value" means the total Charges payable over the Initial Term, being '
            "EUR 2,340,000 excluding VAT.",
        ),
        _section(
            1,
            "2. Scope of Services",
            "The Supplier shall supply, install, commission and support a continuous temperature "
            "monitoring system for the Customer's cold storage network. The Services are "
            "delivered in two Phases: a pilot at a single Depot (Phase 1) followed by a "
            "network-wide rollout (Phase 2).",
        ),
        _section(
            2,
            "2.1 Hardware Supply",
            "The Supplier shall deliver 1,850 Sensors and 64 Gateways in the quantities and to "
            "the Depots set out in Schedule 2. Each Sensor shall be calibrated against a "
            "reference thermometer traceable to the Dutch national standard (VSL) no more than "
            "60 days before delivery, and a calibration certificate bearing the Sensor's serial "
            "number shall be supplied in electronic form.",
            "Title to the hardware passes to the Customer on delivery to the Depot. Risk passes "
            "on signature of the delivery note by the Depot manager. The Supplier shall replace "
            "any Sensor that fails within 36 months of delivery, other than through physical "
            "damage caused by the Customer, within 5 Business Days of notification.",
        ),
        _section(
            2,
            "2.2 Monitoring Platform",
            "The Supplier shall provide the Platform as a subscription service for an Initial "
            "Term of 48 months from the Effective Date. The Platform shall record a reading from "
            "every Sensor at least once every 5 minutes, retain raw readings for no less than "
            "7 years to satisfy the Customer's obligations under the EU Good Distribution "
            "Practice guidelines for medicinal products, and make all readings available for "
            "export in CSV and JSON formats.",
            "Alerts shall be delivered by SMS, e-mail and a webhook to the Customer's warehouse "
            "management system. The Customer may configure alert thresholds per storage zone; "
            "the default excursion thresholds are 2 to 8 degrees Celsius for pharmaceutical "
            "zones and minus 25 to minus 18 degrees Celsius for frozen zones.",
        ),
        _section(
            2,
            "2.3 Exclusions",
            "The Services do not include electrical works at the Depots, the supply of mains "
            "power to Gateways, or the integration of the Platform with any system other than "
            "the Customer's warehouse management system, which at the Effective Date is "
            "Manhattan SCALE version 2019.1. Additional integration work shall be quoted "
            "separately at the day rate of EUR 1,150 set out in Schedule 4.",
        ),
        _section(
            1,
            "3. Acceptance",
            "Each Phase is subject to acceptance testing. The Customer shall not unreasonably "
            "withhold an Acceptance Certificate where the criteria below are met, and shall give "
            "written reasons whenever a certificate is refused.",
        ),
        _section(
            2,
            "3.1 Phase 1 Acceptance Criteria",
            "Phase 1 covers the installation of 120 Sensors and 4 Gateways at the Waalhaven-Zuid "
            "Depot and shall be completed by 31 May 2024 (Milestone M1). Phase 1 shall be "
            "accepted when, over a continuous observation window of 30 days, all of the "
            "following are met.",
            "(a) At least 99.5 percent of scheduled readings from installed Sensors are received "
            "by the Platform. (b) Every Sensor in a spot check of 12 units agrees with the "
            "Customer's reference probe within plus or minus 0.3 degrees Celsius. (c) Simulated "
            "temperature excursions trigger an alert to the on-call phone within 120 seconds in "
            "at least 19 of 20 trials. (d) The Depot staff training described in Schedule 5 has "
            "been delivered to no fewer than 25 employees.",
        ),
        _section(
            2,
            "3.2 Phase 2 Acceptance Criteria",
            "Phase 2 covers the remaining 1,730 Sensors and 60 Gateways across the other "
            "thirteen Depots and shall be completed by 30 September 2024 (Milestone M2). In "
            "addition to the Phase 1 criteria, applied to every Depot, Phase 2 shall be accepted "
            "when the Platform has achieved availability of at least 99.9 percent, measured "
            "monthly, for two consecutive calendar months; when the 95th percentile alert "
            "latency across all Depots is below 90 seconds; and when the Platform has passed the "
            "Customer's penetration test, conducted by an independent tester, with no open "
            "findings rated High or Critical.",
            "The Supplier shall also deliver the validation package required for the Customer's "
            "GDP audit, including the installation qualification and operational qualification "
            "reports for every Depot, no later than 15 October 2024.",
        ),
        _section(
            2,
            "3.3 Acceptance Procedure",
            "The Supplier shall notify the Customer in writing when it considers a Phase ready "
            "for acceptance. The Customer shall run or witness the acceptance tests within "
            "10 Business Days of that notice. If a test fails, the Supplier shall remedy the "
            "failure and the test shall be repeated once at the Supplier's cost; a second "
            "failure entitles the Customer to terminate under clause 8.2.",
        ),
        _section(
            1,
            "4. Fees and Payment",
            "The Charges consist of a one-off hardware and installation fee of EUR 1,020,000 and "
            "a Platform subscription of EUR 27,500 per month. The hardware fee is payable in "
            "three instalments: 20 percent on signature of this Agreement, 30 percent on the "
            "Phase 1 Acceptance Certificate and 50 percent on the Phase 2 Acceptance "
            "Certificate. The subscription is invoiced quarterly in advance.",
            "Invoices are payable within 45 days of receipt. Undisputed amounts not paid when "
            "due bear interest at the statutory commercial rate under article 6:119a of the "
            "Dutch Civil Code. The subscription fee is fixed for the first 24 months and "
            "thereafter may be increased once per year by no more than the change in the Dutch "
            "consumer price index published by CBS, capped at 4 percent.",
        ),
        _section(
            1,
            "5. Penalties for Late Milestones",
            "Time is of the essence for Milestones M1 and M2. The parties agree that the "
            "Customer's losses from a late rollout, including the cost of manual temperature "
            "logging at the Depots, are difficult to quantify, and that the amounts below are a "
            "genuine pre-estimate of those losses.",
        ),
        _section(
            2,
            "5.1 Liquidated Damages",
            "If a Milestone is not achieved by its date, the Supplier shall pay liquidated "
            "damages of 0.5 percent of the Milestone Fee for each Business Day of delay, "
            "starting on the first Business Day after the Milestone date. For Milestone M1 the "
            "Milestone Fee is EUR 306,000 and for Milestone M2 it is EUR 510,000, so a delay of "
            "ten Business Days to M2 gives rise to liquidated damages of EUR 25,500.",
            "Liquidated damages accrue until the date of the relevant Acceptance Certificate and "
            "are deducted from the next invoice. No liquidated damages accrue for any period of "
            "delay caused by the Customer, including late access to a Depot or late provision of "
            "the network connections described in Schedule 6.",
        ),
        _section(
            2,
            "5.2 Cap and Exclusive Remedy",
            "The total liquidated damages payable under this clause shall not exceed 10 percent "
            "of the Contract Value, being EUR 234,000. Once the cap is reached, or if a "
            "Milestone is more than 60 Business Days late, the Customer may terminate this "
            "Agreement for cause under clause 8.2. Liquidated damages are the Customer's sole "
            "financial remedy for delay, but do not limit its rights in respect of defects or "
            "any other breach.",
        ),
        _section(
            1,
            "6. Service Levels",
            "From the Phase 1 Acceptance Certificate the Supplier shall meet the service levels "
            "in this clause. Platform availability is measured monthly and excludes planned "
            "maintenance announced at least 5 Business Days in advance and performed between "
            "01:00 and 05:00 Central European Time on a Sunday.",
            "If availability falls below 99.9 percent in a month, the Customer is entitled to a "
            "service credit of 5 percent of that month's subscription fee; below 99.5 percent "
            "the credit is 15 percent; and below 99.0 percent the credit is 30 percent. Three "
            "months below 99.5 percent in any rolling period of twelve months constitute a "
            "material breach.",
            "Support requests are classified by severity. A Severity 1 request, meaning that "
            "alerts are not being delivered for one or more Depots, shall be acknowledged within "
            "15 minutes at any time of day and resolved or worked around within 4 hours.",
        ),
        _section(
            1,
            "7. Confidentiality",
            "Each party shall keep confidential all information disclosed by the other party in "
            "connection with this Agreement and shall use it only to perform this Agreement. "
            "Temperature readings, alert histories and Depot layouts are the Customer's "
            "confidential information. The Supplier shall host Customer data only in data "
            "centres located in the European Economic Area, currently in Stavanger and "
            "Frankfurt, and shall not use it to train or benchmark products for third parties "
            "without the Customer's written consent.",
            "These obligations survive for five years after termination, except for trade "
            "secrets, which remain protected for as long as they remain trade secrets.",
        ),
        _section(
            1,
            "8. Term and Termination",
            "This Agreement starts on the Effective Date and continues for the Initial Term. It "
            "then renews automatically for successive periods of 12 months unless either party "
            "gives at least 6 months' written notice before the end of the current term.",
        ),
        _section(
            2,
            "8.1 Termination for Convenience",
            "The Customer may terminate this Agreement for convenience at any time after the "
            "Phase 2 Acceptance Certificate by giving 90 days' written notice. In that case the "
            "Customer shall pay a termination fee equal to 15 percent of the subscription fees "
            "that would have been payable for the remainder of the Initial Term. Hardware "
            "already delivered remains the property of the Customer.",
        ),
        _section(
            2,
            "8.2 Termination for Cause",
            "Either party may terminate this Agreement with immediate effect by written notice if "
            "the other party commits a material breach that is not remedied within 30 days of a "
            "notice describing the breach, or if the other party becomes insolvent, is declared "
            "bankrupt or is granted a suspension of payments (surseance van betaling). The "
            "Customer may also terminate for cause in the circumstances described in clauses "
            "3.3 and 5.2.",
        ),
        _section(
            2,
            "8.3 Consequences of Termination",
            "On termination for any reason the Supplier shall, for a transition period of up to "
            "6 months and at the subscription rate then in force, continue to operate the "
            "Platform and assist the Customer in migrating to a replacement service. Within "
            "30 days after the end of the transition period the Supplier shall deliver a "
            "complete export of Customer data and then securely delete it, confirming the "
            "deletion in writing.",
        ),
        _section(
            1,
            "9. Governing Law and Disputes",
            "This Agreement is governed by the laws of the Netherlands. The United Nations "
            "Convention on Contracts for the International Sale of Goods does not apply. Any "
            "dispute shall first be escalated to a steering committee of the parties' chief "
            "operating officers, who shall meet within 10 Business Days of a request. Disputes "
            "not resolved within 30 days of that meeting shall be submitted exclusively to the "
            "Amsterdam District Court.",
            "Signed for Northwind Cold Chain Logistics B.V. by Maarten de Groot, Chief Operating "
            "Officer, and for Halvorsen Sensor Systems AS by Sigrid Halvorsen, Chief Executive "
            "Officer, on 28 February 2024.",
        ),
    ),
)


# --------------------------------------------------------------------------------------------
# (b) Incident post-mortem
# --------------------------------------------------------------------------------------------

INCIDENT_POSTMORTEM = SamplePdf(
    filename="incident_postmortem.pdf",
    title="INC-2291: Orders Database Outage",
    author="Database Reliability Engineering",
    subject="Post-incident review of the orders PostgreSQL write outage on 14 November 2023",
    sections=(
        _section(
            1,
            "Summary",
            "On Tuesday 14 November 2023 the primary PostgreSQL server of the orders database, "
            "pg-orders-01, stopped accepting writes at 09:42 UTC after its write-ahead log (WAL) "
            "volume filled up. Checkout, order amendment and refund flows failed for 47 minutes "
            "until writes were restored at 10:29 UTC, and the service ran in a degraded state "
            "until 12:54 UTC while the backlog of queued orders was replayed. No committed data "
            "was lost.",
            "This review follows our blameless format. It was written by Priya Raman (database "
            "reliability) and Tomasz Wojcik (checkout platform) and reviewed on 21 November 2023 "
            "with the incident commander, Aisha Bello.",
        ),
        _section(
            1,
            "Timeline",
            "All times are in UTC. The timeline was reconstructed from PagerDuty, the "
            "inc-2291 Slack channel, the Patroni logs and the PostgreSQL server logs.",
        ),
        _section(
            2,
            "Detection",
            "At 02:15 the Kafka Connect cluster was upgraded from version 3.4 to 3.6 as part of "
            "routine maintenance. The debezium-orders connector, which streams order changes to "
            "the analytics warehouse through the logical replication slot debezium_orders_slot, "
            "failed to restart because of a renamed configuration property, and nobody was "
            "alerted because the connector health check only covered running tasks.",
            "From 02:15 onwards the slot stopped advancing and PostgreSQL retained every WAL "
            "segment written after that point. At 08:30 retained WAL reached 1.2 TB on the 2 TB "
            "WAL volume. At 09:05 a disk usage warning fired at 85 percent, but it was routed to "
            "a low-urgency queue and acknowledged without action by the on-call engineer, who "
            "was busy with an unrelated deploy.",
            "At 09:42:07 PostgreSQL on pg-orders-01 logged PANIC: could not write to file "
            "pg_wal/xlogtemp.31337: No space left on device, and the postmaster shut down. The "
            "checkout error rate crossed 50 percent at 09:42:40 and the high-urgency page fired "
            "at 09:43.",
        ),
        _section(
            2,
            "Escalation and Failover",
            "At 09:44 Patroni detected the failed primary and promoted the synchronous replica "
            "pg-orders-02; promotion completed at 09:44:51, after 44 seconds. Application writes "
            "nevertheless continued to fail. At 09:51 Aisha Bello declared a SEV-1 and opened the "
            "incident bridge. At 10:03 the team found that the PgBouncer pool in front of the "
            "database still resolved the old primary address, because the DNS record "
            "orders-db-primary.internal had a TTL of 3600 seconds and PgBouncer had cached it.",
            "At 10:17 the team decided to restart PgBouncer on all six pooler hosts rather than "
            "wait for the TTL to expire. The restarts were rolled out one host at a time to "
            "avoid dropping in-flight read traffic, and the last host came back at 10:29, when "
            "writes succeeded again.",
        ),
        _section(
            2,
            "Recovery",
            "Between 10:29 and 12:54 the order intake service replayed 2,130 orders that had "
            "been accepted into the durable retry queue during the outage. Replay was throttled "
            "to 40 orders per second to protect the new primary, which was running without a "
            "synchronous replica. At 11:20 the debezium-orders connector was repaired and the "
            "slot began to advance again.",
            "pg-orders-01 was rebuilt as a replica from a base backup and rejoined the cluster "
            "at 16:05. The incident was closed at 17:30.",
        ),
        _section(
            1,
            "Root Cause",
            "Two independent weaknesses combined: an unbounded replication slot filled the "
            "primary's disk, and a stale DNS record kept clients away from the healthy replica "
            "after failover.",
        ),
        _section(
            2,
            "The Stalled Replication Slot",
            "The direct cause was an unbounded logical replication slot. PostgreSQL does not "
            "remove WAL that a replication slot still needs, whether or not its consumer is "
            "connected, and our configuration left max_slot_wal_keep_size at its default of -1, "
            "meaning unlimited. When the connector stopped consuming, the slot held back WAL for "
            "seven and a half hours while the orders workload wrote about 160 GB of WAL per hour "
            "during the morning peak.",
            "The connector failure itself came from the Kafka Connect upgrade: the new version "
            "rejects the deprecated property database.history.kafka.topic, which our production "
            "connector configuration still used. The upgrade had been tested in staging, but the "
            "staging connector had been recreated in September with the new property name, so "
            "the two configurations had silently drifted apart.",
        ),
        _section(
            2,
            "Contributing Factors",
            "Several factors turned a recoverable situation into a customer-facing outage. The "
            "disk warning at 85 percent was routed to the low-urgency queue because its alert "
            "policy had been copied from the log volume, where disk growth is slow and harmless.",
            "The WAL volume had little headroom: it was sized in 2022 for 24 hours of WAL at the "
            "order volumes of that year, and order volume has since grown by a factor of 2.6. "
            "Finally, the on-call engineer was covering both database and deploy duties that "
            "morning because a colleague was ill, and our rota has no rule that separates those "
            "roles during change windows.",
        ),
        _section(
            2,
            "Why Failover Did Not Restore Writes",
            "Patroni's failover worked as designed. The 47 minute duration was caused by the "
            "connection path: applications connect to PgBouncer, and PgBouncer connects to the "
            "hostname orders-db-primary.internal. Patroni updates that DNS record through a "
            "callback, but the record's TTL of 3600 seconds, set in 2021 to reduce load on the "
            "old DNS servers, meant PgBouncer kept connecting to the dead host.",
            "Our failover runbook assumed a TTL of 30 seconds and did not mention PgBouncer at "
            "all. The last failover drill, in March 2022, predates the introduction of "
            "PgBouncer, so the gap had never been exercised.",
        ),
        _section(
            1,
            "Impact",
            "The outage affected every customer-facing flow that writes to the orders database. "
            "Browsing, search and account pages, which read from separate services, stayed up.",
        ),
        _section(
            2,
            "Customer Impact",
            "During the 47 minutes of write unavailability, 18,400 checkout attempts failed with "
            "an error page. An estimated 6,900 customers retried successfully later the same "
            "day. The 2,130 orders captured by the retry queue were confirmed between "
            "24 minutes and 3 hours 12 minutes late, and their confirmation e-mails were delayed "
            "accordingly. Customer support received 1,140 contacts about the incident, about "
            "four times the normal Tuesday volume.",
            "The commercial team estimates that EUR 612,000 of gross merchandise value was "
            "delayed and approximately EUR 85,000 was lost, based on the conversion rate of "
            "affected sessions compared with the same weekday in the previous four weeks.",
        ),
        _section(
            2,
            "Data Integrity",
            "No committed transactions were lost. pg-orders-02 was a synchronous replica, and a "
            "comparison of the last 10,000 transactions on both servers after recovery showed no "
            "divergence. Because the analytics pipeline was stalled from 02:15 to 11:20, the "
            "warehouse dashboards were stale for nine hours and the daily revenue report for "
            "14 November was published 6 hours late.",
        ),
        _section(
            1,
            "What Went Well",
            "The durable retry queue, introduced after INC-1874 in May 2023, preserved every "
            "order that reached the intake service, and the replay needed no manual "
            "intervention. Patroni promoted a healthy replica in under a minute. The incident "
            "bridge was opened quickly, and the public status page was updated within 11 minutes "
            "of the first page.",
            "Communication with customer support worked well: support leads joined the bridge at "
            "10:00 and published a reply template for affected customers at 10:12, which kept the "
            "average handling time for incident contacts under 6 minutes.",
        ),
        _section(
            1,
            "Where We Got Lucky",
            "The outage began during the European morning peak but before a promotion "
            "scheduled for 12:00, which was expected to triple checkout traffic; the marketing "
            "team postponed it to 15:00 at 10:20. Had the slot stalled a few hours later, the WAL "
            "volume would have filled during the promotion itself.",
            "We were also lucky that Patroni chose pg-orders-02. The asynchronous replica "
            "pg-orders-03 was 38 seconds behind at 09:42, and promoting it would have lost "
            "committed orders that customers had already been told were confirmed.",
        ),
        _section(
            1,
            "Remediation Items",
            "Each item has an owner and a due date and is tracked in the RELIABILITY project.",
        ),
        _section(
            2,
            "Immediate",
            "REM-1: set max_slot_wal_keep_size to 200 GB on all PostgreSQL clusters, so that a "
            "stalled slot is invalidated instead of filling the disk. Owner Priya Raman, due "
            "24 November 2023, done.",
            "REM-2: page the database on-call at high urgency when any replication slot retains "
            "more than 50 GB of WAL or when a WAL volume exceeds 70 percent usage. Owner Priya "
            "Raman, due 24 November 2023, done.",
            "REM-3: reduce the TTL of orders-db-primary.internal and all other database primary "
            "records to 30 seconds, and configure PgBouncer with dns_max_ttl of 15 seconds. Owner "
            "Tomasz Wojcik, due 28 November 2023.",
        ),
        _section(
            2,
            "Longer Term",
            "REM-4: replace DNS-based primary discovery with Patroni-aware routing through "
            "HAProxy health checks, removing the dependency on record TTLs entirely. Owner "
            "Daniel Okafor, due 31 January 2024.",
            "REM-5: alert when a Debezium connector has been in the FAILED state for more than "
            "10 minutes, and add connector restarts to the Kafka Connect upgrade checklist. "
            "Owner Lena Fischer, due 15 December 2023.",
            "REM-6: run a quarterly failover game day for the orders database that measures the "
            "time until application writes succeed, not just the time until Patroni promotes a "
            "replica. The first game day is scheduled for 18 January 2024. Owner Aisha Bello.",
        ),
        _section(
            1,
            "Lessons Learned",
            "A replication slot is a promise to keep data, and an unbounded promise will "
            "eventually be called in. Every slot we create now has an owner, a WAL retention "
            "limit and an alert.",
            "Failover is only finished when clients can write. Measuring the Patroni promotion "
            "time alone gave us false confidence: a 44 second promotion hid a 47 minute outage.",
            "Warning-level disk alerts that nobody acts on are worse than none, because they "
            "teach the on-call engineer to ignore them. We have removed 31 warning-level "
            "database alerts that had no documented action.",
        ),
    ),
)


# --------------------------------------------------------------------------------------------
# (c) Employee handbook
# --------------------------------------------------------------------------------------------

EMPLOYEE_HANDBOOK = SamplePdf(
    filename="employee_handbook.pdf",
    title="Employee Handbook, Edition 2024.1",
    author="Larchmont Analytics GmbH, People Team",
    subject="Policies for employees in Berlin and Leipzig",
    sections=(
        _section(
            1,
            "Welcome",
            "This handbook explains the policies that apply to all employees of Larchmont "
            "Analytics GmbH in Berlin and Leipzig. It complements, but does not replace, your "
            "employment contract and the works agreements negotiated with the works council. "
            "Where this handbook and your contract differ, your contract prevails.",
            "The handbook is maintained by the People team. This edition, 2024.1, took effect on "
            "1 January 2024. Questions go to people@larchmont-analytics.example or to Katrin "
            "Seidel, Head of People.",
            "New joiners are paired with a buddy from another team for their first three months. "
            "Your buddy is your first contact for the unwritten rules, such as where to find a "
            "quiet room or how the Friday demo sessions work.",
        ),
        _section(
            1,
            "Working Hours",
            "Larchmont measures performance by results, not by hours at a desk, but German "
            "working-time law still applies and we record working time for everyone.",
        ),
        _section(
            2,
            "Core Hours",
            "The standard working week is 39 hours for full-time employees. We use flexitime "
            "with core hours from 10:00 to 15:00, Monday to Thursday, and from 10:00 to 13:00 on "
            "Fridays. Outside core hours you may organise your time freely, provided your team "
            "can reach you and you record your hours in Personio by the end of each week.",
        ),
        _section(
            2,
            "Overtime",
            "Overtime must be approved in advance by your manager. Approved overtime is credited "
            "to your flexitime account, which may hold up to 40 hours in credit. Hours above "
            "that limit must be taken as time off within three months or, with the approval of "
            "the Head of People, paid out at the end of the quarter.",
            "Work on Sundays or public holidays requires the prior approval of the Head of People "
            "and is compensated with a replacement day off within two weeks.",
        ),
        _section(
            1,
            "Leave Policy",
            "All leave is requested and approved in Personio, which also shows your remaining "
            "entitlement for the year.",
        ),
        _section(
            2,
            "Annual Leave",
            "Full-time employees receive 28 days of paid annual leave per calendar year, plus "
            "24 and 31 December, which are company holidays. Part-time entitlement is pro-rated "
            "by the number of working days per week. Please request leave at least four weeks in "
            "advance for periods longer than five consecutive working days.",
            "Up to 5 days of unused leave may be carried over into the next year, but "
            "carried-over days must be taken by 31 March or they lapse. Statutory leave that "
            "could not be taken because of illness is carried over in line with German law for "
            "up to 15 months.",
        ),
        _section(
            2,
            "Sick Leave",
            "If you are unable to work because of illness, tell your manager and the People team "
            "before 10:00 on the first day of absence. From the fourth calendar day of illness "
            "you need a medical certificate; doctors now send it electronically to your health "
            "insurer, and you only need to confirm in Personio that you have seen a doctor. Sick "
            "days never count against annual leave.",
        ),
        _section(
            2,
            "Parental Leave",
            "Employees may take parental leave of up to three years per child under the Federal "
            "Parental Allowance and Parental Leave Act. Please notify the People team at least "
            "seven weeks before the leave starts. Larchmont tops up the statutory parental "
            "allowance to 80 percent of net salary for the first 8 weeks of leave for any "
            "parent, and offers a phased return at 60 percent of working hours on full pay for "
            "the first two weeks back.",
        ),
        _section(
            2,
            "Special Leave",
            "Paid special leave is granted for the following events: 2 days for your own wedding "
            "or civil partnership, 2 days for the birth of your child in addition to parental "
            "leave, 2 days for the death of a spouse, partner, parent or child, and 1 day for "
            "moving house at the company's request. Time spent serving in a volunteer fire "
            "brigade or the Federal Agency for Technical Relief is released in line with the "
            "applicable law.",
        ),
        _section(
            1,
            "Expenses",
            "Larchmont reimburses reasonable costs you incur on company business. Spend company "
            "money as carefully as you would spend your own.",
        ),
        _section(
            2,
            "Travel",
            "Business travel must be booked through the company travel portal, TravelPerk, "
            "unless it is significantly cheaper elsewhere. Rail is the default for journeys "
            "under 4 hours door to door; second class is standard and first class is allowed "
            "for journeys over 3 hours. Flights are booked in economy class.",
            "Hotel costs are reimbursed up to EUR 160 per night, or EUR 210 per night in London, "
            "Paris, Zurich and New York. Meals on business trips are covered by the statutory "
            "per diem: EUR 14 for a day away of more than 8 hours and EUR 28 for each full day "
            "away, reduced when a meal is provided.",
        ),
        _section(
            2,
            "Submitting Claims",
            "Submit expense claims in Spendesk within 30 days of the expense. Attach an itemised "
            "receipt for every item above EUR 25; for smaller amounts a description is enough. "
            "Your manager approves claims up to EUR 1,000, and claims above EUR 1,000 also need "
            "approval from Finance. Claims approved by the 20th of a month are reimbursed with "
            "that month's payroll on its last working day.",
            "Alcohol is not reimbursed except at client events pre-approved by a director. A "
            "lost receipt may be replaced by a signed declaration, at most twice per calendar "
            "year.",
        ),
        _section(
            1,
            "Remote Work",
            "Most roles at Larchmont can be done partly from home. The rules below keep teams "
            "connected and keep us compliant with tax and social security law.",
        ),
        _section(
            2,
            "Eligibility",
            "After completing the six-month probation period, employees may work remotely for up "
            "to 3 days per week by agreement with their manager. Teams agree on at least one "
            "anchor day per week when everyone is in the office; for most engineering teams this "
            "is Wednesday. Managers may decline or revoke a remote work arrangement only for "
            "documented business reasons.",
        ),
        _section(
            2,
            "Working from Abroad",
            "You may work from another country of the European Union or from Switzerland for up "
            "to 20 working days per calendar year, provided you request an A1 certificate "
            "through the People team at least 10 working days before you travel. Working from "
            "outside the EU and Switzerland is not permitted because of tax and data protection "
            "risks, and this includes short stays during a holiday.",
        ),
        _section(
            2,
            "Equipment",
            "Each employee receives a one-off home office allowance of EUR 450 for a desk, chair "
            "or monitor, plus a monthly internet allowance of EUR 25. Company laptops may be "
            "taken home but must never be left unattended in a vehicle.",
            "Laptops are refreshed every four years, or earlier if a repair would cost more than "
            "EUR 500. Report broken or lost equipment to the IT desk on internal extension 4100 "
            "within one working day.",
        ),
        _section(
            1,
            "Learning and Development",
            "Every employee has a personal development plan, reviewed twice a year in the April "
            "and October check-ins with their manager.",
        ),
        _section(
            2,
            "Training Budget",
            "Each employee has an annual learning budget of EUR 1,500 and 5 learning days. The "
            "budget can be used for courses, certifications, books and conference tickets related "
            "to your current or planned role. Unused budget does not roll over into the next "
            "year.",
            "Courses costing more than EUR 3,000 in total may be funded across two years if you "
            "agree to a repayment clause, under which a share of the cost is repaid if you leave "
            "within 12 months of completing the course.",
        ),
        _section(
            2,
            "Conferences",
            "If you speak at a conference, the company pays travel and accommodation outside your "
            "learning budget and counts talk preparation as working time, up to 3 days per talk. "
            "Slides must be reviewed by your manager and, where they mention customers, by the "
            "legal team at least 10 working days before the event.",
        ),
        _section(
            1,
            "Information Security",
            "We handle our customers' data, and their trust depends on every one of us following "
            "these rules, every day.",
        ),
        _section(
            2,
            "Devices and Passwords",
            "All work is done on company-managed laptops with full-disk encryption enabled. Use "
            "the company password manager, 1Password, and choose a passphrase of at least "
            "14 characters for your laptop login. Every account that supports it must use your "
            "YubiKey hardware token as the second factor; SMS codes are not accepted. Screens "
            "must lock automatically after 5 minutes of inactivity.",
            "Customer datasets may be stored only in the approved analytics environment in the "
            "Frankfurt region. Copying customer data to personal devices, personal cloud storage "
            "or AI tools that are not on the approved list is a serious breach of policy.",
        ),
        _section(
            2,
            "Reporting Incidents",
            "Report suspected security incidents, including lost devices, phishing links you "
            "have clicked and data sent to the wrong recipient, within 1 hour to "
            "security@larchmont-analytics.example or by calling the security hotline on internal "
            "extension 4040, which is staffed around the clock. Early reports are never "
            "punished; concealing an incident is.",
            "Under the GDPR the company has 72 hours to notify the data protection authority of "
            "a personal data breach, so every hour counts.",
        ),
        _section(
            1,
            "Leaving Larchmont",
            "Notice periods are set out in your contract; during probation either party may "
            "terminate with two weeks' notice. On your last day, return your laptop, YubiKey and "
            "access badge to the IT desk in Berlin, or send them by insured courier using the "
            "prepaid label provided by the People team. Access to all systems is removed at "
            "18:00 on your last working day.",
        ),
    ),
)


# --------------------------------------------------------------------------------------------
# (d) Field manual without an outline
# --------------------------------------------------------------------------------------------

FIELD_MANUAL = SamplePdf(
    filename="field_manual_no_outline.pdf",
    title="TL-40 Sensor Field Installation Manual",
    author="Halvorsen Sensor Systems AS, Field Services",
    subject="Installing, pairing and troubleshooting TL-40 temperature sensors",
    with_outline=False,
    sections=(
        _section(
            1,
            "1 Before You Arrive",
            "This manual is for installation technicians fitting Halvorsen TL-40 temperature "
            "sensors in cold storage rooms. Read it fully before your first site visit; the "
            "laminated quick reference card does not replace it.",
        ),
        _section(
            2,
            "1.1 Tools and Parts",
            "Each installation kit contains 10 TL-40 sensors, 10 stainless steel mounting "
            "brackets, 20 M4 screws with wall plugs and one spare lithium battery pack. You also "
            "need a cordless drill with a 6 mm masonry bit, a torque screwdriver set to 1.2 Nm, "
            "the Halvorsen Installer app on a company phone, and a calibrated reference probe if "
            "the site requires a spot check.",
            "Keep sensors at room temperature before installation. A sensor taken straight from "
            "a vehicle at minus 10 degrees Celsius may show condensation behind its window; wait "
            "30 minutes before pairing it.",
        ),
        _section(
            2,
            "1.2 Site Survey",
            "Ask the depot manager for the storage zone plan and mark the intended sensor "
            "positions before drilling. Check gateway coverage from each position with the "
            "signal test in the app: a received signal strength of minus 85 dBm or better is "
            "required, and positions between minus 85 and minus 95 dBm need a second gateway or "
            "a repeater. Report any position that cannot be covered to the project coordinator "
            "on the same day.",
        ),
        _section(
            1,
            "2 Mounting the Sensor",
            "Mount every sensor on its bracket, never directly on a wall or rack, so that air can "
            "circulate around the housing.",
        ),
        _section(
            2,
            "2.1 Placement Rules",
            "Mount sensors 1.5 metres above the floor, or at the height of the top pallet "
            "position in racked freezer rooms, and at least 50 centimetres from doors, "
            "evaporator coils and defrost heaters. Never mount a sensor in the air stream of an "
            "evaporator fan, which makes readings swing by several degrees during defrost "
            "cycles.",
            "Rooms of up to 200 square metres need two sensors; larger rooms need one additional "
            "sensor for every further 150 square metres. Pharmaceutical zones always need a "
            "sensor at the warmest point identified in the thermal mapping report.",
        ),
        _section(
            2,
            "2.2 Pairing with the Gateway",
            "Press and hold the pairing button on the back of the sensor for 5 seconds until the "
            "LED flashes blue. In the Installer app, scan the QR code on the sensor label, choose "
            "the storage zone and confirm. Pairing normally completes within 20 seconds. The "
            "first reading appears in Halvorsen Monitor within 5 minutes; do not leave the site "
            "until you have seen it for every sensor you installed.",
        ),
        _section(
            1,
            "3 Troubleshooting",
            "Most problems on site are caused by poor gateway coverage or a badly seated battery "
            "pack. Work through the checks below before you declare a unit faulty.",
        ),
        _section(
            2,
            "3.1 LED Codes",
            "A single green flash every 30 seconds means the sensor is working normally. Two red "
            "flashes every 10 seconds mean that the sensor cannot reach a gateway; move the "
            "gateway or add a repeater. Three amber flashes mean the battery is below 15 percent "
            "and should be replaced within two weeks. A steady red light means an internal "
            "fault: take the sensor out of service.",
            "If the LED shows nothing at all, remove and reinsert the battery pack, making sure "
            "that the polarity mark on the pack faces the hinge of the housing.",
        ),
        _section(
            2,
            "3.2 Returning Faulty Units",
            "Faulty sensors are replaced under warranty within 5 business days. Open a return in "
            "the Installer app to obtain an RMA number, which starts with RMA-HS followed by six "
            "digits, write it on the box and ship the unit to the Halvorsen service centre in "
            "Stavanger. Do not open the sensor housing: a broken calibration seal voids both the "
            "warranty and the unit's calibration certificate.",
        ),
        _section(
            1,
            "4 Maintenance",
            "Sensors need little maintenance, but a short visit per site each year keeps the "
            "readings trustworthy for audits.",
        ),
        _section(
            2,
            "4.1 Battery Replacement",
            "A battery pack lasts about 4 years at one reading every 5 minutes, or about 2 years "
            "in freezer rooms below minus 20 degrees Celsius. Replace packs when the app reports "
            "15 percent or less, and always replace all sensors in a room on the same visit so "
            "that the room needs only one visit per battery cycle.",
        ),
        _section(
            2,
            "4.2 Annual Calibration Check",
            "Once a year, compare each sensor with a calibrated reference probe placed next to "
            "it for at least 20 minutes. A deviation of more than 0.3 degrees Celsius fails the "
            "check; record the result in the app and replace the sensor under warranty.",
        ),
    ),
)

SAMPLE_PDFS: tuple[SamplePdf, ...] = (
    SUPPLY_AGREEMENT,
    INCIDENT_POSTMORTEM,
    EMPLOYEE_HANDBOOK,
    FIELD_MANUAL,
)


# --------------------------------------------------------------------------------------------
# Text sources
# --------------------------------------------------------------------------------------------

ARCHITECTURE_NOTES_MD = """\
# Telemetry Ingestion Service: Architecture Notes

These notes describe how readings from TL-40 sensors travel from a cold storage room to
Halvorsen Monitor. They are written for engineers joining the platform team and for on-call
engineers who need a mental model of the system at three in the morning. Decisions that are
still being debated are collected at the end under Open Questions. Last reviewed on
12 February 2024 by Jonas Eriksen and Mei Tanaka.

## Overview

Each sensor sends a reading every 5 minutes to a GW-8 gateway over a sub-GHz radio link. The
gateway batches up to 50 readings and forwards them over LTE to the ingestion endpoint,
`ingest.halvorsen-monitor.example`, using MQTT over TLS. At peak the service receives about
38,000 readings per second from roughly 11 million sensors across 2,400 customer sites.

The pipeline has three stages: a stateless receiver, a pool of normalisation workers and the
time-series store. Stages are connected by Kafka topics, so each stage can be scaled and
restarted independently.

## Components

### Gateway Receiver

The receiver terminates MQTT connections, authenticates each gateway with its client
certificate and writes the raw batch to the `telemetry.raw` topic, keyed by gateway serial
number. It does no parsing beyond checking the envelope, which keeps it small enough to run
on 6 instances even at peak. A gateway that sends more than 120 batches per minute is
throttled with a token bucket, because a misbehaving firmware build once flooded the
receivers with retransmissions.

### Normalisation Workers

Workers consume `telemetry.raw`, unpack each batch, convert units, attach the storage zone
from the sensor registry and apply calibration offsets. The registry lookup is cached for
10 minutes; a sensor moved to another zone therefore shows its old zone for at most that long.
Workers are written in Go and process about 9,000 readings per second per core.

### Time-Series Store

Normalised readings are written to TimescaleDB hypertables partitioned by week. Raw readings
are kept for 7 years because pharmaceutical customers must be able to show a complete
temperature history in a GDP audit. Continuous aggregates provide 15-minute and hourly
summaries for dashboards, and the alerting engine reads the raw stream directly from Kafka
rather than from the store.

## Failure Handling

### Retries and the Dead-Letter Queue

A reading that fails normalisation is retried with backoff. After the retry budget is spent,
the message goes to a dead-letter topic together with the last error, and the on-call engineer
is notified if the topic grows by more than 500 messages in 10 minutes.

```yaml
# Retry budget for the normalisation workers; values are per message.
retry:
  max_attempts: 3
  backoff_seconds: [2, 10, 60]
dead_letter:
  topic: telemetry.dlq
  retention_days: 14
```

Messages in the dead-letter topic are replayed after the fault is fixed:

```bash
# Replay everything that failed since midnight UTC; run from the ops bastion.
telemetry-replay --topic telemetry.dlq --since "$(date -u +%Y-%m-%dT00:00:00Z)" --rate 2000
```

### Backpressure

If the store falls behind, workers pause consumption once their write buffer holds more than
200,000 readings. Kafka retains `telemetry.raw` for 72 hours, which is the upper bound on how
long the store can be unavailable without losing data. Gateways also buffer up to 48 hours of
readings locally, so a site that loses its LTE connection uploads its backlog when it
reconnects; late readings keep their original timestamps.

## Security

Gateways authenticate with X.509 client certificates issued by our private certificate
authority and valid for 2 years; the receiver checks revocation against a list refreshed every
15 minutes. Sensors do not hold certificates. Instead, each radio frame is signed with a
per-sensor key provisioned at the factory in Stavanger, and workers drop readings whose
signature does not verify, counting them in the `readings_rejected_total` metric. Access to
production Kafka requires a just-in-time grant approved by a second engineer and expires
after 4 hours.

## Operations

### Deployment

All three stages are deployed to Kubernetes in the Frankfurt and Stavanger regions. Each
region can carry the full load on its own. Deployments use a canary of 5 percent of pods for
30 minutes, and the canary is rolled back automatically if the dead-letter rate doubles.

### Capacity Numbers

- Receivers: 6 pods at peak, 2 vCPU each.
- Workers: 48 pods at peak, autoscaled on consumer lag with a target of 15 seconds.
- Store: 3 primary nodes with 2 replicas each, 18 TB of compressed data as of January 2024.

## Open Questions

Should calibration offsets be applied at the gateway instead of in the workers? It would
remove the registry lookup from the hot path, but firmware releases are slower to roll out
than worker deployments, and a wrong offset would then be much harder to correct.
"""

RATE_LIMITER_PY = '''\
"""Rate limiting primitives for the telemetry API.

Two algorithms are provided:

* ``TokenBucket`` smooths bursts. A bucket holds up to ``capacity`` tokens and refills
  continuously at ``refill_rate`` tokens per second; each request spends one or more tokens.
* ``SlidingWindowCounter`` enforces "at most N requests per window" per key, using the
  usual two-window approximation, which needs constant memory per key.

Both take an injectable clock so that they can be tested without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

Clock = Callable[[], float]

DEFAULT_CAPACITY = 20
DEFAULT_REFILL_PER_SECOND = 5.0
_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "day": 86400.0}


def parse_rate(spec: str) -> tuple[int, float]:
    """Parse a rate such as ``"100/min"`` or ``"5/s"`` into ``(limit, window_seconds)``."""
    try:
        count_text, unit = spec.strip().split("/", 1)
        limit = int(count_text)
        window = _UNITS[unit.strip().lower()]
    except (ValueError, KeyError):
        raise ValueError(f"invalid rate {spec!r}; expected e.g. '100/min'") from None
    if limit <= 0:
        raise ValueError(f"rate limit must be positive, got {limit}")
    return limit, window


def retry_after_seconds(deficit: float, refill_rate: float) -> float:
    """Seconds until ``deficit`` tokens have been refilled, rounded up to whole seconds."""
    if deficit <= 0:
        return 0.0
    return float(math.ceil(deficit / refill_rate))


def rate_limit_headers(limit: int, remaining: float, reset_after: float) -> dict[str, str]:
    """Build the ``RateLimit-*`` response headers advertised to API clients."""
    return {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(max(0, math.floor(remaining))),
        "RateLimit-Reset": str(max(0, math.ceil(reset_after))),
    }


class TokenBucket:
    """A thread-safe token bucket.

    The bucket starts full. ``try_acquire`` never blocks; callers that want to wait can
    sleep for ``retry_after()`` seconds and try again.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        refill_rate: float = DEFAULT_REFILL_PER_SECOND,
        clock: Clock = time.monotonic,
    ) -> None:
        if capacity <= 0 or refill_rate <= 0:
            raise ValueError("capacity and refill_rate must be positive")
        self.capacity = capacity
        self.refill_rate = refill_rate
        self._clock = clock
        self._tokens = float(capacity)
        self._updated = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(self.capacity, self._tokens + elapsed * self.refill_rate)
        self._updated = now

    @property
    def tokens(self) -> float:
        """Tokens currently available (after refilling up to now)."""
        with self._lock:
            self._refill()
            return self._tokens

    def try_acquire(self, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if available; return whether the request may proceed."""
        if cost > self.capacity:
            raise ValueError(f"cost {cost} exceeds bucket capacity {self.capacity}")
        with self._lock:
            self._refill()
            if self._tokens >= cost:
                self._tokens -= cost
                return True
            return False

    def retry_after(self, cost: float = 1.0) -> float:
        """Seconds to wait before a request of ``cost`` tokens would be allowed."""
        with self._lock:
            self._refill()
            return retry_after_seconds(cost - self._tokens, self.refill_rate)


class SlidingWindowCounter:
    """Approximate sliding-window limit of ``limit`` requests per ``window`` seconds per key.

    The count for the current fixed window is combined with the previous window's count,
    weighted by how much of the previous window still overlaps the sliding window.
    """

    def __init__(self, limit: int, window: float, clock: Clock = time.time) -> None:
        if limit <= 0 or window <= 0:
            raise ValueError("limit and window must be positive")
        self.limit = limit
        self.window = window
        self._clock = clock
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def _estimate(self, key: str, now: float) -> tuple[int, int, int, float]:
        index = int(now // self.window)
        start, current, previous = self._counts.get(key, (index, 0, 0))
        if index == start + 1:
            current, previous = 0, current
        elif index > start + 1:
            current, previous = 0, 0
        overlap = 1.0 - (now - index * self.window) / self.window
        return index, current, previous, current + previous * overlap

    def allow(self, key: str) -> bool:
        """Count a request for ``key`` and return whether it is within the limit."""
        with self._lock:
            index, current, previous, estimate = self._estimate(key, self._clock())
            if estimate + 1 > self.limit:
                self._counts[key] = (index, current, previous)
                return False
            self._counts[key] = (index, current + 1, previous)
            return True

    def remaining(self, key: str) -> float:
        """How many more requests ``key`` may make right now."""
        with self._lock:
            *_, estimate = self._estimate(key, self._clock())
            return max(0.0, self.limit - estimate)


def limiter_from_spec(spec: str, clock: Clock = time.time) -> SlidingWindowCounter:
    """Create a sliding-window limiter from a rate such as ``"600/min"``."""
    limit, window = parse_rate(spec)
    return SlidingWindowCounter(limit, window, clock=clock)
'''

RELEASE_NOTES_TXT = """\
Halvorsen Monitor 4.2 Release Notes
Released 9 April 2024

Halvorsen Monitor 4.2 is a feature release for the hosted platform, the GW-8 gateway firmware
and the Installer app. The platform upgrade is applied automatically to all tenants during the
maintenance window on Sunday 14 April 2024 between 01:00 and 05:00 CET. Gateway firmware 4.2.0
is rolled out in stages over the following three weeks.

Alert escalation chains. Alerts can now escalate through up to five steps, for example from
the depot on-call phone to the regional manager after 10 minutes and to the quality assurance
lead after 30 minutes. Each step can use SMS, e-mail, a voice call or a webhook. Existing
single-step alert rules are migrated unchanged.

Excursion reports for GDP audits. The new excursion report lists every temperature excursion
in a chosen period together with its duration, peak value, acknowledgement time and the
comment entered by the person who closed it. Reports are exported as signed PDF files with a
SHA-256 checksum printed on every page, which auditors asked for during the 2023 inspections.

Longer battery life. Firmware 4.2.0 for the TL-40 sensor batches radio transmissions when the
reading has not changed by more than 0.1 degrees Celsius, which extends battery life by about
18 percent in stable rooms. Readings are still taken every 5 minutes; only transmission is
batched, and any excursion is sent immediately.

API changes. The readings endpoint now supports cursor pagination with the `after` parameter;
offset pagination is deprecated and will be removed in version 5.0, planned for the first
quarter of 2025. Requests are limited to 600 per minute per API key, and responses carry
RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset headers.

Fixed issues. Dashboards no longer show a gap at the change to daylight saving time (ticket
HM-4471). Sensors moved between storage zones now appear in the new zone within 10 minutes
instead of after the next gateway restart (HM-4502). CSV exports with more than one million
rows no longer time out (HM-4519).

Known issue. On gateways with firmware older than 3.8, the signal test in the Installer app
reports the strength of the last packet received rather than the average over 60 seconds.
Update the gateway firmware before running a site survey.
"""

SAMPLE_TEXT_FILES: dict[str, str] = {
    "architecture_notes.md": ARCHITECTURE_NOTES_MD,
    "rate_limiter.py": RATE_LIMITER_PY,
    "release_notes.txt": RELEASE_NOTES_TXT,
}

# Queries with one clearly right source file, for the demo and for retrieval smoke tests.
SAMPLE_QUERIES: tuple[tuple[str, str], ...] = (
    ("liquidated damages per business day for a late milestone", "supply_agreement.pdf"),
    ("Phase 1 acceptance criteria temperature accuracy", "supply_agreement.pdf"),
    ("why did failover not restore writes to the orders database", "incident_postmortem.pdf"),
    ("max_slot_wal_keep_size replication slot filled the disk", "incident_postmortem.pdf"),
    ("hotel reimbursement limit per night in London", "employee_handbook.pdf"),
    ("how many days can I work from abroad", "employee_handbook.pdf"),
    ("sensor LED flashes red twice", "field_manual_no_outline.pdf"),
    ("dead-letter topic retry budget for normalisation workers", "architecture_notes.md"),
    ("token bucket refill rate", "rate_limiter.py"),
    ("battery life improvement in firmware 4.2.0", "release_notes.txt"),
)


# --------------------------------------------------------------------------------------------
# Writing the corpus
# --------------------------------------------------------------------------------------------


def write_sample_corpus(dest: pathlib.Path) -> list[pathlib.Path]:
    """Write the sample corpus into ``dest`` (created if missing) and return the file paths.

    Existing files of the same names are overwritten; repeated calls produce identical bytes.
    """
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in SAMPLE_PDFS:
        path = dest / spec.filename
        _write_pdf(spec, path)
        paths.append(path)
    for name, text in SAMPLE_TEXT_FILES.items():
        path = dest / name
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------
# PDF layout
# --------------------------------------------------------------------------------------------

_PAGE_WIDTH, _PAGE_HEIGHT = pymupdf.paper_size("a4")
_MARGIN_X = 72.0
_MARGIN_TOP = 72.0
_MARGIN_BOTTOM = 72.0
_TEXT_WIDTH = _PAGE_WIDTH - 2 * _MARGIN_X
_LINE_SPACING = 1.3
# Fixed so that repeated runs produce identical files (PDF date format, UTC).
_PDF_DATE = "D:20240301090000+00'00'"


@dataclass(frozen=True)
class _Style:
    fontname: str
    fontsize: float
    space_before: float
    space_after: float

    @property
    def leading(self) -> float:
        return self.fontsize * _LINE_SPACING


_TITLE_STYLE = _Style("hebo", 20, 0, 14)
_HEADING_STYLES = {1: _Style("hebo", 16, 16, 6), 2: _Style("hebo", 13, 10, 4)}
_BODY_STYLE = _Style("helv", 10, 0, 6)
# A heading is moved to the next page unless this many body lines fit below it.
_KEEP_WITH_NEXT_LINES = 2


def _text_width(text: str, style: _Style) -> float:
    return pymupdf.get_text_length(text, fontname=style.fontname, fontsize=style.fontsize)


def _wrap(text: str, style: _Style, width: float = _TEXT_WIDTH) -> list[str]:
    """Greedy word wrap using the font's real glyph widths."""
    if not text.isascii():
        # Base-14 fonts only cover a single-byte encoding; keep the sample text plain ASCII.
        raise ValueError(f"sample PDF text must be ASCII: {text[:40]!r}")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if _text_width(word, style) > width:
            raise ValueError(f"word too wide for the text column: {word!r}")
        candidate = f"{current} {word}" if current else word
        if _text_width(candidate, style) <= width:
            current = candidate
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


class _PdfLayout:
    """Flows styled blocks of text down A4 pages, starting a new page when one is full."""

    def __init__(self, doc: pymupdf.Document) -> None:
        self.doc = doc
        self.page: pymupdf.Page | None = None
        self.y = 0.0  # top of the next line box on the current page

    @property
    def page_number(self) -> int:
        """1-based number of the current page."""
        return self.page.number + 1 if self.page is not None else 0

    def _new_page(self) -> None:
        self.page = self.doc.new_page(width=_PAGE_WIDTH, height=_PAGE_HEIGHT)
        self.y = _MARGIN_TOP

    def _room(self) -> float:
        return _PAGE_HEIGHT - _MARGIN_BOTTOM - self.y

    def _draw_line(self, line: str, style: _Style) -> None:
        assert self.page is not None
        if self.y + style.leading > _PAGE_HEIGHT - _MARGIN_BOTTOM + 1e-6:
            raise RuntimeError(f"line would overflow the page: {line[:40]!r}")
        baseline = pymupdf.Point(_MARGIN_X, self.y + style.fontsize)
        written = self.page.insert_text(
            baseline, line, fontname=style.fontname, fontsize=style.fontsize
        )
        if written != 1:
            raise RuntimeError(f"insert_text wrote {written} lines for {line[:40]!r}")
        self.y += style.leading

    def heading(self, text: str, style: _Style) -> tuple[int, float]:
        """Draw a heading kept on one page with the first body lines; return (page, top y)."""
        lines = _wrap(text, style)
        needed = style.space_before + len(lines) * style.leading
        needed += style.space_after + _KEEP_WITH_NEXT_LINES * _BODY_STYLE.leading
        if self.page is None or needed > self._room():
            self._new_page()
        elif self.y > _MARGIN_TOP:
            self.y += style.space_before
        top = self.y
        for line in lines:
            self._draw_line(line, style)
        self.y += style.space_after
        return self.page_number, top

    def paragraph(self, text: str, style: _Style = _BODY_STYLE) -> None:
        """Draw a paragraph, breaking across pages line by line."""
        if self.page is None:
            self._new_page()
        for line in _wrap(text, style):
            if style.leading > self._room():
                self._new_page()
            self._draw_line(line, style)
        self.y += style.space_after


def _write_pdf(spec: SamplePdf, path: pathlib.Path) -> None:
    doc = pymupdf.open()
    try:
        layout = _PdfLayout(doc)
        layout.heading(spec.title, _TITLE_STYLE)
        for text in spec.preamble:
            layout.paragraph(text)
        toc: list[list] = []
        for section in spec.sections:
            page, top = layout.heading(section.title, _HEADING_STYLES[section.level])
            # The destination points at the heading, so a section can be located within its page.
            target = {"kind": pymupdf.LINK_GOTO, "page": page - 1}
            target["to"] = pymupdf.Point(_MARGIN_X, top)
            toc.append([section.level, section.title, page, target])
            for text in section.paragraphs:
                layout.paragraph(text)
        if spec.with_outline:
            doc.set_toc(toc, collapse=False)
        doc.set_metadata(
            {
                "title": spec.title,
                "author": spec.author,
                "subject": spec.subject,
                "keywords": "",
                "creator": "contextual_assets.samples",
                "producer": "PyMuPDF",
                "creationDate": _PDF_DATE,
                "modDate": _PDF_DATE,
                "trapped": "",
            }
        )
        # no_new_id: MuPDF would otherwise write a fresh random /ID into the trailer.
        doc.save(path, garbage=3, deflate=True, no_new_id=True)
    finally:
        doc.close()
